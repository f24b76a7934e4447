"""lookahead."""
