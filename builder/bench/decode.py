"""Decode benchmark: HF, CPU peers (ONNX Runtime GenAI, llama.cpp) and our engines, every method.

All rows run in one process on the same HumanEval prompts, batch 1, one prompt at a time, with the
same max_new_tokens and stop tokens disabled, so every row emits exactly max_new tokens per prompt.
The peer rows and ours are measured interleaved (`_interleave`): every row decodes prompt i before any
decodes prompt i + 1, the rows' order rotating per prompt, so a machine whose speed drifts during the run
(other tenants, frequency) weighs on every row alike and the ratios stay comparable on a noisy machine
(HF runs first: it is the oracle, and no ratio goal rests on it). Each row first decodes one prompt untimed
(warm-up: session creation, JIT, first-shape allocations); model conversion, export and loading are never timed.
Every row's tokens are compared with HF greedy (the oracle, always computed): a row that differs is
flagged (`matches_hf: false`, `first_mismatch_prompt`), never dropped. A peer that cannot run here
(package, converter) is a `skipped` row with the reason.

Columns: tokens/s (wall), tokens per CPU-second of this process (less sensitive to other processes on
a shared machine), the wall ratio to HF greedy and to the ORT GenAI rows; τ = tokens per target
pass after prefill; draft / target ms per decode step from the Decoder's `Timing` (target includes
verification, which runs inside the graph); verify ms/step is an estimate (`verify_estimate`);
cpu/wall = process CPU seconds per wall second (≤ 1 for a single-threaded row: below 1 when other
processes take the core); busy threads = this process's OS threads that used ≥ 10 % of the row's CPU
time (Linux /proc; 1 = the row really ran on one thread). Tuned rows (`tuned`, builder/bench/tuned.py)
are our methods with the trees / W,N,G that `trtspec tune` picked, labelled "(tuned)". Ratios and the
tables: builder/bench/decode_table.py; several fixtures in one run: builder/bench/fixtures.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from builder.bench import peers
from builder.bench.acceptance import MethodTally, decoders, run_method
from builder.bench.tuned import Tuned
from builder.data.humaneval import heldout_prompts
from builder.errors import UserError
from builder.stages.decoders import Decoder, build_decoder, load_tokenizer
from builder.stages.parts import local_dir
from builder.recipe.loader import LoadedRecipe
from builder.speculative.engine import Draft

ROW_GROUPS = ("hf", "ortgenai", "llamacpp", "ours", "torch")
DEFAULT_ROWS = ("hf", "ortgenai", "llamacpp", "ours")
Generate = Callable[[Sequence[int], int], peers.PeerOutput]
# A fixture's recipe set, by name: the first recipe gives plain decoding and its own Lookahead
# (`acceptance.decoders`), the others one method each. regime-llama3 is the tiny fixture inflated into
# a memory-bound regime (builder/fixture/regime.py; made at setup).
FIXTURES = {
    "tiny-llama3": ("tiny-llama3.yaml", "tiny-llama3-eagle2.yaml", "tiny-llama3-eagle1.yaml",
                    "tiny-llama3-medusa.yaml", "tiny-llama3-ngram.yaml"),
    "regime-llama3": ("regime-llama3-lookahead.yaml", "regime-llama3-eagle2.yaml", "regime-llama3-eagle1.yaml",
                      "regime-llama3-medusa.yaml", "regime-llama3-ngram.yaml"),
}  # fmt: skip
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
            raise UserError(f"no recipe or fixture named {name!r}", field="recipes",
                            allowed=", ".join([*FIXTURES, *stems]) + ", or a recipe path")  # fmt: skip
    return out


def bench_decode(loaded: list[LoadedRecipe], num_prompts: int, max_new: int, rows: Sequence[str] = DEFAULT_ROWS,
                 threads: int = 1, lookup: int = 10, llama_cpp_src: str | None = None,
                 tuned: Sequence[Tuned] = ()) -> dict[str, Any]:  # fmt: skip
    """Every selected row group on the first `num_prompts` HumanEval prompts, then (with "ours") a row per
    `tuned` overlay; the report of one fixture (rows + settings; ratios: `decode_table.add_ratios`)."""
    unknown = set(rows) - set(ROW_GROUPS)
    if unknown:
        raise ValueError(f"unknown rows {sorted(unknown)} (allowed: {', '.join(ROW_GROUPS)})")
    base = local_dir(loaded[0], ("model", "checkpoint"), loaded[0].recipe.model.checkpoint)
    rec = loaded[0].recipe
    tok_dir = local_dir(loaded[0], ("model", "tokenizer"), rec.model.tokenizer) if rec.model.tokenizer else base
    prompts = [load_tokenizer(tok_dir).encode(p).ids for p in heldout_prompts(num_prompts)]
    hf, oracle = _hf_rows(base, prompts, max_new, lookup)
    out = hf if "hf" in rows else []
    n_ctx = max(len(p) for p in prompts) + max_new + 32
    runs: list[_Run | dict[str, Any]] = []  # a dict: a row that cannot run (skipped, with the reason)
    if "ortgenai" in rows:
        for key, ngram in (("greedy", None), ("n-gram", (peers.NGRAM_SIZE, lookup))):
            make = lambda ngram=ngram: peers.ortgenai_peer(base, threads, ngram)  # noqa: E731
            runs.append(_peer_run(make, f"ortgenai {key}"))
    if "llamacpp" in rows:
        for key, lk in (("greedy", None), ("prompt-lookup", (peers.LOOKUP_NGRAM, lookup))):
            make = lambda lk=lk: peers.llamacpp_peer(base, threads, lk, llama_cpp_src, n_ctx)  # noqa: E731
            runs.append(_peer_run(make, f"llama.cpp {key}"))
    vocab = int(json.loads((base / "config.json").read_text())["vocab_size"])
    if "ours" in rows:
        runs += [_OurRun(d, vocab) for d in decoders(loaded, "onnxruntime")]
        runs += [_tuned_run(t, vocab) for t in tuned]
    _interleave([r for r in runs if isinstance(r, _Run)], prompts, max_new)
    out += [r if isinstance(r, dict) else r.row(oracle) for r in runs]
    if "torch" in rows:
        out += [_our_row(d, prompts, max_new, oracle, vocab) for d in decoders(loaded, "torch")]
    return {
        "benchmark": "decode", "fixture": base.parent.name, "recipe": str(loaded[0].path), "checkpoint": str(base),
        "prompts": f"HumanEval first {num_prompts}", "max_new_tokens": max_new, "threads": threads,
        "torch_threads": torch.get_num_threads(), "machine": platform.platform(), "cpus": os.cpu_count(),
        "versions": _versions("torch", "transformers", "onnxruntime"), "rows": out,
    }  # fmt: skip


def _versions(*dists: str) -> dict[str, str | None]:
    from importlib import metadata

    def version(d: str) -> str | None:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            return None

    return {d: version(d) for d in dists}


# -- timing and checking ----------------------------------------------------------------------------


def _timed(label: str, prompts: list[list[int]], max_new: int, generate: Generate) -> tuple[dict[str, Any], list]:
    """Warm up on the first prompt, then decode every prompt; (row, new tokens per prompt)."""
    generate(prompts[0], max_new)
    outs, passes = [], 0
    t0, c0, k0 = time.perf_counter(), _cpu(), _thread_ticks()
    for ids in tqdm(prompts, desc=label, leave=False, disable=None):
        o = generate(ids, max_new)
        outs.append(o.tokens)
        passes = -1 if (o.passes is None or passes < 0) else passes + o.passes
    seconds, cpu, busy = time.perf_counter() - t0, _cpu() - c0, _busy_threads(k0, _thread_ticks())
    tokens = sum(len(o) for o in outs)
    tau = round((tokens - len(prompts)) / passes, 4) if passes > 0 else None
    return {"method": label, "prompts": len(prompts), "tokens": tokens, "tau": tau, "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 2), "tokens_per_cpu_s": round(tokens / cpu, 2) if cpu else None,
            "cpu_per_wall": round(cpu / seconds, 3), "busy_threads": busy}, outs  # fmt: skip


def _cpu() -> float:
    return time.process_time()  # user + system of this process, finer than os.times' clock ticks


def _thread_ticks() -> dict[str, int]:
    """CPU clock ticks (user + system) per OS thread of this process; empty off Linux."""
    ticks = {}
    for stat in Path("/proc/self/task").glob("*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        ticks[stat.parent.name] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return ticks


def _busy_threads(before: dict[str, int], after: dict[str, int], share: float = 0.1) -> int | None:
    """Threads that used ≥ `share` of the CPU time between two `_thread_ticks` (1: single-threaded)."""
    used = {t: n - before.get(t, 0) for t, n in after.items()}
    total = sum(used.values())
    return sum(u >= share * total for u in used.values()) if total > 0 else None


def _check(row: dict[str, Any], outs: list[list[int]], oracle: list[list[int]]) -> dict[str, Any]:
    """Token-for-token equality with HF greedy; the first differing prompt (and token) when not."""
    bad = next((i for i, (a, b) in enumerate(zip(outs, oracle)) if a != b), None)
    row["matches_hf"] = bad is None and len(outs) == len(oracle)
    row["first_mismatch_prompt"] = bad
    if bad is not None:
        a, b = outs[bad], oracle[bad]
        row["first_mismatch_token"] = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return row


# -- rows -------------------------------------------------------------------------------------------


def _hf_rows(base: Path, prompts: list[list[int]], max_new: int, lookup: int) -> tuple[list[dict[str, Any]], list]:
    """HF greedy (also the oracle) and HF prompt lookup, both with eos disabled."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32).eval()

    def runner(**extra: Any) -> Generate:
        def generate(ids: Sequence[int], n: int) -> peers.PeerOutput:
            x = torch.tensor([list(ids)])
            with torch.no_grad():
                out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                                     eos_token_id=None, **extra)  # eos off, like every row
            toks = out[0, len(ids):].tolist()
            return peers.PeerOutput(toks, len(toks) - 1 if not extra else None)

        return generate

    rows: list[dict[str, Any]] = []
    oracle: list[list[int]] = []
    variants: list[tuple[str, str, dict[str, Any]]] = [
        ("hf greedy", "hf greedy", {}),
        ("hf prompt-lookup", f"hf prompt-lookup(n=2,k={lookup})", {"prompt_lookup_num_tokens": lookup})]
    for key, label, extra in variants:
        row, outs = _timed(label, prompts, max_new, runner(**extra))
        oracle = oracle or outs
        info = {"key": key, "engine": "transformers", "threads": torch.get_num_threads()}
        rows.append(_check({**info, **row}, outs, oracle))
    return rows, oracle


class _Run:
    """One row of the interleaved measurement (`_interleave`): each prompt's wall time, this process's CPU time and
    per-thread CPU ticks, summed over prompts; `failed` once a decode raised (the row then says why)."""

    def __init__(self, key: str) -> None:
        self.key, self.seconds, self.cpu = key, 0.0, 0.0
        self.failed: str | None = None
        self.ticks: dict[str, int] = {}

    def warm(self, ids: list[int], max_new: int) -> None:
        try:
            self._decode(ids, max_new)
        except Exception as e:  # noqa: BLE001 - as in `once`
            self.failed = f"{type(e).__name__}: {e}"
        self._reset()

    def once(self, ids: list[int], max_new: int) -> None:
        if self.failed is not None:
            return
        t0, c0, k0 = time.perf_counter(), _cpu(), _thread_ticks()
        try:
            self._decode(ids, max_new)
        except Exception as e:  # noqa: BLE001 - one row never takes the benchmark down; it says why
            self.failed = f"{type(e).__name__}: {e}"
            return
        self.seconds += time.perf_counter() - t0
        self.cpu += _cpu() - c0
        for t, n in _thread_ticks().items():
            self.ticks[t] = self.ticks.get(t, 0) + n - k0.get(t, 0)

    def cpu_columns(self, tokens: int) -> dict[str, Any]:
        return {"tokens_per_cpu_s": round(tokens / self.cpu, 2) if self.cpu else None,
                "cpu_per_wall": round(self.cpu / self.seconds, 3) if self.seconds else None,
                "busy_threads": _busy_threads({}, self.ticks)}  # fmt: skip

    def skipped(self) -> dict[str, Any]:
        return {"key": self.key, "method": self.key, "skipped": f"failed while measured: {self.failed}"}

    def row(self, oracle: list[list[int]]) -> dict[str, Any]:
        raise NotImplementedError

    def _decode(self, ids: list[int], max_new: int) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError


def _interleave(runs: Sequence[_Run], prompts: list[list[int]], max_new: int) -> None:
    """Warm every row up on the first prompt (untimed), then decode prompt by prompt, every row on each prompt
    before the next, the rows' order rotating by one per prompt: a machine whose speed drifts (other processes,
    frequency) weighs on every row alike, so the ratios hold where one row after another would not."""
    for r in runs:
        r.warm(prompts[0], max_new)
    n = len(runs)
    for i, ids in enumerate(tqdm(prompts, desc=f"{n} rows, interleaved", leave=False, disable=None)):
        for r in [*runs[i % n :], *runs[: i % n]] if n else []:
            r.once(ids, max_new)


class _PeerRun(_Run):
    def __init__(self, key: str, peer: peers.Peer) -> None:
        super().__init__(key)
        self.peer, self.passes = peer, 0
        self.outs: list[list[int]] = []

    def _decode(self, ids: list[int], max_new: int) -> None:
        o = self.peer.generate(ids, max_new)
        self.outs.append(o.tokens)
        self.passes = -1 if (o.passes is None or self.passes < 0) else self.passes + o.passes

    def _reset(self) -> None:
        self.outs, self.passes = [], 0

    def row(self, oracle: list[list[int]]) -> dict[str, Any]:
        if self.failed is not None:
            return self.skipped()
        tokens, n = sum(len(o) for o in self.outs), len(self.outs)
        tau = round((tokens - n) / self.passes, 4) if self.passes > 0 else None
        row = {"key": self.key, "engine": self.peer.engine, "method": self.peer.label, "prompts": n, "tokens": tokens,
               "tau": tau, "seconds": round(self.seconds, 3), "tokens_per_s": round(tokens / self.seconds, 2),
               **self.cpu_columns(tokens), **self.peer.info}  # fmt: skip
        return _check(row, self.outs, oracle)


def _peer_run(make: Callable[[], peers.Peer], key: str) -> _Run | dict[str, Any]:
    """One peer's run, or a skipped row with the reason (missing package or converter, failed conversion)."""
    try:
        return _PeerRun(key, make())
    except Exception as e:  # noqa: BLE001 - a peer never takes the benchmark down; its row says why
        reason = str(e) if isinstance(e, peers.PeerUnavailable) else f"{type(e).__name__}: {e}"
        return {"key": key, "method": key, "skipped": reason}


class _Tap:
    """An engine that records what passes through: each request's emitted tokens (batch 1, one request
    at a time) and the last drafted tree. Costs a list append per step, counted in target time."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.outputs: list[list[int]] = []
        self.last_draft: Draft | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def start(self, prompts, sampling):  # noqa: ANN001, ANN201 - the Engine protocol's signature
        ids, pre = self._engine.start(prompts, sampling)
        self.outputs.append([int(pre.tokens[0])])
        return ids, pre

    def step(self, seqs, drafts, sampling):  # noqa: ANN001, ANN201
        out = self._engine.step(seqs, drafts, sampling)
        self.outputs[-1].extend(out.emitted(0))
        if drafts[0].num_nodes > 1 or self.last_draft is None:
            self.last_draft = drafts[0]
        return out


def _our_row(dec: Decoder, prompts: list[list[int]], max_new: int, oracle: list[list[int]], vocab: int,
             suffix: str = "") -> dict[str, Any]:  # fmt: skip
    """One of our methods through acceptance.run_method (batch 1), then its verification estimate."""
    tap = _Tap(dec.engine)
    tapped = dataclasses.replace(dec, engine=tap, stop_ids=[])
    run_method(tapped, prompts[:1], max_new)  # warm-up
    tap.outputs.clear()
    c0, k0 = _cpu(), _thread_ticks()
    row = run_method(tapped, prompts, max_new)
    cpu = _cpu() - c0
    row["tokens_per_cpu_s"] = round(row["tokens"] / cpu, 2) if cpu else None
    row["cpu_per_wall"] = round(cpu / row["seconds"], 3)
    row["busy_threads"] = _busy_threads(k0, _thread_ticks())
    row["key"] = f"trtspec-{'ort' if dec.engine.name == 'onnxruntime' else dec.engine.name} {dec.label}{suffix}"
    row["method"], row["spec_method"], row["tuned"] = row["key"], dec.method, bool(suffix)
    threads = getattr(dec.engine, "threads", None)
    row["threads"] = torch.get_num_threads() if threads is None else threads
    _check(row, [t[:max_new] for t in tap.outputs], oracle)
    if tap.last_draft is not None:
        row.update(verify_estimate(tap.last_draft, vocab))
    return row


class _OurRun(_Run):
    """One of our methods through `acceptance.MethodTally` (batch 1), then its verification estimate."""

    def __init__(self, dec: Decoder, vocab: int, suffix: str = "", info: dict[str, Any] | None = None) -> None:
        name = "ort" if dec.engine.name == "onnxruntime" else dec.engine.name
        super().__init__(f"trtspec-{name} {dec.label}{suffix}")
        self.dec, self.vocab, self.tuned, self.info, self.max_new = dec, vocab, bool(suffix), info or {}, 0
        self.tap = _Tap(dec.engine)
        self.tally = MethodTally(dataclasses.replace(dec, engine=self.tap, stop_ids=[]))

    def _decode(self, ids: list[int], max_new: int) -> None:
        self.max_new = max_new
        self.tally.decode(ids, max_new)

    def _reset(self) -> None:
        self.tap.outputs.clear()
        self.tally = MethodTally(self.tally.dec)

    def row(self, oracle: list[list[int]]) -> dict[str, Any]:
        if self.failed is not None:
            return {**self.skipped(), **self.info}
        row = self.tally.row()
        row.update(self.cpu_columns(row["tokens"]))
        row["key"] = row["method"] = self.key
        row["spec_method"], row["tuned"] = self.dec.method, self.tuned
        threads = getattr(self.dec.engine, "threads", None)
        row["threads"] = torch.get_num_threads() if threads is None else threads
        _check(row, [t[: self.max_new] for t in self.tap.outputs], oracle)
        if self.tap.last_draft is not None:
            row.update(verify_estimate(self.tap.last_draft, self.vocab))
        return {**row, **self.info}


def _tuned_run(t: Tuned, vocab: int) -> _Run | dict[str, Any]:
    """Our engine built from a tuned overlay (cached like any recipe), or a skipped row with the reason."""
    info = {"tuned": True, "spec_method": t.spec_method, "setting": t.setting, "predicted_speedup": t.predicted,
            "overlay": str(t.overlay)}  # fmt: skip
    key = f"trtspec-ort {t.method} (tuned)"
    if t.skipped is not None:
        return {"key": key, "method": key, **info, "skipped": t.skipped}
    try:
        dec = build_decoder(t.recipe)
    except Exception as e:  # noqa: BLE001 - one overlay that cannot build never takes the benchmark down
        return {"key": key, "method": key, **info, "skipped": f"engine: {type(e).__name__}: {e}"}
    return _OurRun(dec, vocab, " (tuned)", info)


# -- verification estimate ----------------------------------------------------------------------------


def verify_estimate(draft: Draft, vocab: int, runs: int = 200) -> dict[str, Any]:
    """ms per call of a standalone decomposed TreeVerify (greedy) on [1, T, V] random logits with
    `draft`'s tree, ORT, 1 thread, IOBinding, mean of `runs` calls, minus the mean call of an empty
    graph (Identity) bound the same way. An estimate of the in-graph cost, not a measurement of it."""
    from plugins.tree_verify.contract import INPUT_NAMES

    t, (p, w) = draft.num_nodes, draft.paths.shape
    rng = np.random.default_rng(0)
    feeds = {"logits": rng.standard_normal((1, t, vocab), dtype=np.float32),
             "tokens": draft.tokens.astype(np.int32)[None], "paths": draft.paths.astype(np.int32)[None],
             "temperature": np.zeros(1, np.float32), "top_p": np.ones(1, np.float32),
             "uniforms": np.zeros((1, w), np.float32), "draft_probs": np.ones((1, t), np.float32)}  # fmt: skip
    feeds = {k: np.ascontiguousarray(feeds[k]) for k in INPUT_NAMES}
    full = _mean_call_ms(_verify_model(feeds, identity=False), feeds, runs)
    empty = _mean_call_ms(_verify_model(feeds, identity=True), feeds, runs)
    return {"verify_ms_per_step_est": round(max(full - empty, 0.0), 4), "verify_call_ms": round(full, 4),
            "empty_call_ms": round(empty, 4), "verify_tree": {"T": t, "P": p, "W": w, "V": vocab}}  # fmt: skip


def _verify_model(feeds: dict[str, np.ndarray], identity: bool):
    import onnx
    from onnx import helper

    from plugins.tree_verify.contract import DOMAIN, OUTPUTS
    from plugins.tree_verify.onnx_op import MIN_OPSET, decompose, make_node

    types = {np.dtype(np.float32): onnx.TensorProto.FLOAT, np.dtype(np.int32): onnx.TensorProto.INT32}
    inputs = [helper.make_tensor_value_info(k, types[v.dtype], list(v.shape)) for k, v in feeds.items()]
    if identity:  # the same inputs bound, one trivial node: what a run call costs without the work
        nodes, outputs = [helper.make_node("Identity", ["tokens"], ["out"])], ["out"]
    else:
        outputs = [s.name for s in OUTPUTS]
        nodes = [make_node(list(feeds), outputs, "greedy")]
    results = [helper.make_tensor_value_info(o, onnx.TensorProto.INT32, None) for o in outputs]  # all int32
    graph = helper.make_graph(nodes, "verify_estimate", inputs, results)
    opsets = [helper.make_opsetid("", MIN_OPSET), helper.make_opsetid(DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    return model if identity else decompose(model)


def _mean_call_ms(model, feeds: dict[str, np.ndarray], runs: int) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    io = sess.io_binding()
    for name, arr in feeds.items():
        io.bind_input(name, "cpu", 0, arr.dtype, list(arr.shape), arr.ctypes.data)
    for o in sess.get_outputs():
        io.bind_output(o.name, "cpu")
    for _ in range(20):
        sess.run_with_iobinding(io)
    t0 = time.perf_counter()
    for _ in range(runs):
        sess.run_with_iobinding(io)
    return 1e3 * (time.perf_counter() - t0) / runs
