"""CLI subcommands, imported lazily by builder.cli."""
