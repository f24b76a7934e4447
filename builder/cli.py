"""The `trtspec` command: a thin click shell over the builder package.

Subcommands are imported lazily (click's LazyGroup pattern) so `trtspec validate` never imports
torch or GPU modules. Every `UserError` is printed as one line per problem and exits with code 2.
"""

from __future__ import annotations

import importlib
import sys

import click

from builder import __version__
from builder.errors import UserError

# name -> (module, attribute, short help). Help text lives here so `--help` imports nothing heavy.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "validate": ("builder.commands.recipe_cmds", "validate", "Check recipes; exit 2 with precise errors."),
    "plan": ("builder.commands.recipe_cmds", "plan", "Show build stages, cache keys and the memory plan."),
    "schema": ("builder.commands.recipe_cmds", "schema", "Print the recipe JSON schema."),
    "build": ("builder.commands.build_cmds", "build", "Build the recipe's engines (cached, atomic, resumable)."),
    "generate": (
        "builder.commands.generate_cmds",
        "generate",
        "Generate text with speculative decoding on this machine (ONNX Runtime; --engine torch).",
    ),
    "serve": (
        "builder.commands.serve_cmds",
        "serve",
        "Serve a recipe's Triton repository (built first) with tritonserver.",
    ),
    "bench": (
        "builder.commands.bench_cmds",
        "bench",
        "perf_analyzer sweep of a served recipe: speculative vs no-speculation baseline, report + plots.",
    ),
    "deploy": (
        "builder.commands.deploy_cmds",
        "deploy",
        "TensorRT-LLM deployment bundle (target.backend: trtllm): checkpoint, build.sh, repository, launch/k8s/bench.",
    ),
    "profile-acceptance": (
        "builder.commands.generate_cmds",
        "profile_acceptance",
        "τ and acceptance per depth for every method on held-out prompts.",
    ),
    "ci": (
        "builder.commands.ci_cmds",
        "ci",
        "CI over a recipe set: build, check (lossless, τ, speed, FP8), gate, publish.",
    ),
    "pull": (
        "builder.commands.ci_cmds",
        "pull",
        "Restore a recipe's published stages into the build cache (hashes checked).",
    ),
    "cache": ("builder.commands.cache_cmds", "cache", "The build cache: list its entries, prune the unused ones."),
    "convert-draft": (
        "builder.commands.draft_cmds",
        "convert_draft",
        "Write a pickled draft (or target) once as safetensors.",
    ),
    "train-draft": (
        "builder.commands.train_cmds",
        "train_draft",
        "Train the recipe's draft for its target (EAGLE-3, Medusa; NVIDIA modelopt): checkpoints, resume.",
    ),
    "tune": (
        "builder.commands.tune_cmds",
        "tune",
        "Pick the tree / draft sizes / draft schedule maximising E[τ]/c(T); predicted vs measured.",
    ),
    "doctor": (
        "builder.commands.doctor_cmds",
        "doctor",
        "What this host has; per backend whether it can build and serve here, and why not.",
    ),
}


class LazyGroup(click.Group):
    """A click group that imports each subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, _, help_) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except UserError as exc:
            for line in str(exc).splitlines():
                click.echo(f"error: {_clip(line)}", err=True)
            ctx.exit(2)


def _clip(line: str, limit: int = 1000) -> str:
    """One error line, cut so that a hostile value cannot flood the terminal."""
    return line if len(line) <= limit else f"{line[:limit]}… ({len(line) - limit} more characters)"


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trtspec")
def cli() -> None:
    """trtspec: Llama 3 + speculative decoding (Medusa, EAGLE, Lookahead, n-gram) from one YAML recipe to
    FP8 engines and a Triton model repository.

    \b
    Typical flow:
      trtspec validate recipes/tiny-llama3.yaml
      trtspec plan recipes/llama3-8b-1xh100-fp8-eagle.yaml --set build.max_batch_size=16
      trtspec build recipes/tiny-llama3.yaml
      trtspec generate recipes/tiny-llama3.yaml --prompt "def fib(n):"
      trtspec serve recipes/tiny-llama3.yaml
      trtspec deploy recipes/llama3-70b-tp4-h100-fp8-trtllm-eagle.yaml   # TensorRT-LLM bundle
    """


def main() -> None:
    cli(prog_name="trtspec")


if __name__ == "__main__":
    sys.exit(main())
