"""Decode benchmark: HF, CPU peers (ONNX Runtime GenAI, llama.cpp) and our engines, every method.

All rows run in one process on the same HumanEval prompts, batch 1, one prompt at a time, with the
same max_new_tokens and stop tokens disabled, so every row emits exactly max_new tokens per prompt.
The peer rows and ours are measured interleaved (`interleave`): every row decodes prompt i before any
decodes prompt i + 1, the rows' order rotating per prompt, so a machine whose speed drifts during the run
(other tenants, frequency) weighs on every row alike and the ratios stay comparable on a noisy machine
(HF runs first: it is the oracle, and no ratio goal rests on it). Each row first decodes one prompt untimed
(warm-up: session creation, JIT, first-shape allocations); model conversion, export and loading are never timed.
Every row's tokens are compared with HF greedy (the oracle, always computed): a row that differs is
flagged (`matches_hf: false`, `first_mismatch_prompt`), never dropped. ORT GenAI runs three ways: greedy and n-gram
with a `Generator` per prompt (as its own benchmark script does), and greedy with one `Generator` rewound for every
prompt ("greedy reused": GenAI without its per-request setup, its best case). A peer that cannot run here
(package, converter) is a `skipped` row with the reason.

Columns: tokens/s (wall), tokens per CPU-second of this process (less sensitive to other processes on
a shared machine), the wall ratio to HF greedy and to the ORT GenAI rows; the wall time split into the mean ms
from a prompt's call to its first new token (setup + prefill) and µs per token after it (the decode loop; HF's
generate does not say when its first token came); τ = tokens per target
pass after prefill; draft / target ms per decode step from the Decoder's `Timing` (target includes
verification, which runs inside the graph); verify ms/step is an estimate (`devtools.bench.verify_cost`);
cpu/wall = process CPU seconds per wall second (≤ 1 for a single-threaded row: below 1 when other
processes take the core); busy threads = this process's OS threads that used ≥ 10 % of the row's CPU
time (Linux /proc; 1 = the row really ran on one thread). Tuned rows (`tuned`, devtools/bench/tuned.py)
are our methods with the trees / W,N,G that `trtspec tune` picked, labelled "(tuned)". Ratios and the
tables: devtools/bench/decode_table.py; several fixtures in one run: devtools/bench/fixtures.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from pathlib import Path
from typing import Any, Sequence

import torch

from builder.bench.acceptance import decoders
from builder.data.humaneval import heldout_prompts
from builder.errors import UserError
from builder.recipe.loader import LoadedRecipe
from builder.stages.decoders import DecoderSetup, load_tokenizer
from builder.stages.parts import local_dir
from devtools.bench import peers
from devtools.bench.rows import OurRun, Run, hf_runs, interleave, peer_run, tuned_run
from devtools.bench.tuned import Tuned

ROW_GROUPS = ("hf", "ortgenai", "llamacpp", "ours", "torch")
DEFAULT_ROWS = ("hf", "ortgenai", "llamacpp", "ours")
# A fixture's recipe set, by name: the first recipe gives plain decoding and its own Lookahead
# (`acceptance.decoders`), the others one method each. regime-llama3 is the tiny fixture inflated into
# a memory-bound regime (devtools/fixture/regime.py; made at setup).
FIXTURES = {
    "tiny-llama3": (
        "tiny-llama3.yaml",
        "tiny-llama3-eagle3.yaml",
        "tiny-llama3-eagle2.yaml",
        "tiny-llama3-eagle1.yaml",
        "tiny-llama3-medusa.yaml",
        "tiny-llama3-ngram.yaml",
    ),
    "regime-llama3": (
        "regime-llama3-lookahead.yaml",
        "regime-llama3-eagle3.yaml",
        "regime-llama3-eagle2.yaml",
        "regime-llama3-eagle1.yaml",
        "regime-llama3-medusa.yaml",
        "regime-llama3-ngram.yaml",
    ),
}
DEFAULT_FIXTURE = "tiny-llama3"


def resolve_recipes(names: Sequence[str], recipes_dir: Path) -> list[Path]:
    """Recipe files from fixture names (`FIXTURES`), recipe names (`recipes_dir`/NAME.yaml) or paths."""
    out: list[Path] = []
    for name in names or [DEFAULT_FIXTURE]:
        if name in FIXTURES:
            out += [recipes_dir / r for r in FIXTURES[name]]
        elif Path(name).is_file():
            out.append(Path(name))
        elif "/" not in name and (recipes_dir / f"{name}.yaml").is_file():
            out.append(recipes_dir / f"{name}.yaml")
        else:
            stems = sorted(p.stem for p in recipes_dir.glob("*.yaml"))
            raise UserError(
                f"no recipe or fixture named {name!r}",
                field="recipes",
                allowed=", ".join([*FIXTURES, *stems]) + ", or a recipe path",
            )
    return out


def bench_decode(
    loaded: list[LoadedRecipe],
    num_prompts: int,
    max_new: int,
    rows: Sequence[str] = DEFAULT_ROWS,
    threads: int = 1,
    lookup: int = 10,
    llama_cpp_src: str | None = None,
    tuned: Sequence[Tuned] = (),
) -> dict[str, Any]:
    """Every selected row group on the first `num_prompts` HumanEval prompts, then (with "ours") a row per
    `tuned` overlay; the report of one fixture (rows + settings; ratios: `decode_table.add_ratios`)."""
    unknown = set(rows) - set(ROW_GROUPS)
    if unknown:
        raise ValueError(f"unknown rows {sorted(unknown)} (allowed: {', '.join(ROW_GROUPS)})")
    base = local_dir(loaded[0], ("model", "checkpoint"), loaded[0].recipe.model.checkpoint)
    rec = loaded[0].recipe
    tok_dir = local_dir(loaded[0], ("model", "tokenizer"), rec.model.tokenizer) if rec.model.tokenizer else base
    prompts = [load_tokenizer(tok_dir).encode(p).ids for p in heldout_prompts(num_prompts)]
    hf = hf_runs(base, lookup)
    interleave(hf, prompts, max_new)
    oracle = hf[0].outs  # HF greedy
    out = [r.row(oracle) for r in hf] if "hf" in rows else []
    n_ctx = max(len(p) for p in prompts) + max_new + 32
    runs: list[Run | dict[str, Any]] = []  # a dict: a row that cannot run (skipped, with the reason)
    if "ortgenai" in rows:
        for key, ngram, reuse in (
            ("greedy", None, False),
            ("n-gram", (peers.NGRAM_SIZE, lookup), False),
            ("greedy reused", None, True),
        ):
            make = lambda ngram=ngram, reuse=reuse: peers.ortgenai_peer(base, threads, ngram, reuse)  # noqa: E731
            runs.append(peer_run(make, f"ortgenai {key}"))
    if "llamacpp" in rows:
        for key, lk in (("greedy", None), ("prompt-lookup", (peers.LOOKUP_NGRAM, lookup))):
            make = lambda lk=lk: peers.llamacpp_peer(base, threads, lk, llama_cpp_src, n_ctx)  # noqa: E731
            runs.append(peer_run(make, f"llama.cpp {key}"))
    vocab = int(json.loads((base / "config.json").read_text())["vocab_size"])
    if "ours" in rows:
        ours = decoders(loaded, "onnxruntime")
        runs += [OurRun(d, vocab) for d in [*ours, *private_pools(ours)]]
        runs += [tuned_run(t, vocab) for t in tuned]
    interleave([r for r in runs if isinstance(r, Run)], prompts, max_new)
    out += [r if isinstance(r, dict) else r.row(oracle) for r in runs]
    if "torch" in rows:
        torch_runs = [OurRun(d, vocab) for d in decoders(loaded, "torch")]
        interleave(torch_runs, prompts, max_new)
        out += [r.row(oracle) for r in torch_runs]
    return {
        "benchmark": "decode",
        "fixture": base.parent.name,
        "recipe": str(loaded[0].path),
        "checkpoint": str(base),
        "prompts": f"HumanEval first {num_prompts}",
        "max_new_tokens": max_new,
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": _versions("torch", "transformers", "onnxruntime"),
        "rows": out,
    }


def private_pools(decs: Sequence[DecoderSetup]) -> list[DecoderSetup]:
    """For each n-gram decoder with a shared pool, its twin without one (the same engine; each request drafts from
    its own text only, as ORT GenAI's n-gram does), so the table shows what the pool adds."""
    from builder.speculative import registry
    from builder.speculative.ngram.drafter import NgramFactory

    out = []
    for d in decs:
        f = d.make_drafter
        if isinstance(f, NgramFactory) and f.config.shared_pool:
            private = f.config.model_copy(update={"shared_pool": False})
            name = registry.facts(private).label
            out.append(dataclasses.replace(d, make_drafter=NgramFactory(private), label=name))
    return out


def _versions(*dists: str) -> dict[str, str | None]:
    from importlib import metadata

    def version(d: str) -> str | None:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            return None

    return {d: version(d) for d in dists}
