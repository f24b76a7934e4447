"""The rows of the decode benchmark (`devtools.bench.decode`) and how they are measured.

A row is a `Run`: HF (`hf_runs`), a CPU peer (`PeerRun`: ONNX Runtime GenAI, llama.cpp) or one of our
decoders (`OurRun`, also a tuned overlay's: `tuned_run`). `interleave` warms every row up on the first prompt
(untimed) and then decodes prompt by prompt, every row on prompt i before any on prompt i + 1, the order rotating
by one per prompt, so a machine whose speed drifts weighs on every row alike. Each row sums its prompts' wall
time, this process's CPU time and per-thread CPU ticks; `row(oracle)` is its report row, checked token for token
against the oracle (`check_tokens`). Our rows add the verification estimate (`devtools.bench.verify_cost`).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm import tqdm

from builder.bench.acceptance import MethodTally, split_columns
from builder.speculative.protocols import Draft
from builder.stages.decoders import DecoderSetup, build_decoder
from builder.timing import rotated
from devtools.bench import peers
from devtools.bench.tuned import Tuned
from devtools.bench.verify_cost import verify_estimate

Generate = Callable[[Sequence[int], int], peers.PeerOutput]


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


def check_tokens(row: dict[str, Any], outs: list[list[int]], oracle: list[list[int]]) -> dict[str, Any]:
    """Token-for-token equality with HF greedy; the first differing prompt (and token) when not."""
    bad = next((i for i, (a, b) in enumerate(zip(outs, oracle)) if a != b), None)
    row["matches_hf"] = bad is None and len(outs) == len(oracle)
    row["first_mismatch_prompt"] = bad
    if bad is not None:
        a, b = outs[bad], oracle[bad]
        row["first_mismatch_token"] = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return row


class Run:
    """One row of the interleaved measurement (`interleave`): each prompt's wall time, this process's CPU time and
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
        return {
            "tokens_per_cpu_s": round(tokens / self.cpu, 2) if self.cpu else None,
            "cpu_per_wall": round(self.cpu / self.seconds, 3) if self.seconds else None,
            "busy_threads": _busy_threads({}, self.ticks),
        }

    def skipped(self) -> dict[str, Any]:
        return {"key": self.key, "method": self.key, "skipped": f"failed while measured: {self.failed}"}

    def row(self, oracle: list[list[int]]) -> dict[str, Any]:
        raise NotImplementedError

    def _decode(self, ids: list[int], max_new: int) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError


def interleave(runs: Sequence[Run], prompts: list[list[int]], max_new: int) -> None:
    """Warm every row up on the first prompt (untimed), then decode prompt by prompt, every row on each prompt
    before the next, the rows' order rotating by one per prompt: a machine whose speed drifts (other processes,
    frequency) weighs on every row alike, so the ratios hold where one row after another would not."""
    for r in runs:
        r.warm(prompts[0], max_new)
    n = len(runs)
    for i, ids in enumerate(tqdm(prompts, desc=f"{n} rows, interleaved", leave=False, disable=None)):
        for r in rotated(runs, i):
            r.once(ids, max_new)


class PeerRun(Run):
    def __init__(self, key: str, peer: peers.Peer) -> None:
        super().__init__(key)
        self.peer, self.passes = peer, 0
        self.first: float | None = 0.0  # summed seconds to the first token (None: the peer does not say)
        self.outs: list[list[int]] = []

    def _decode(self, ids: list[int], max_new: int) -> None:
        o = self.peer.generate(ids, max_new)
        self.outs.append(o.tokens)
        self.passes = -1 if (o.passes is None or self.passes < 0) else self.passes + o.passes
        self.first = None if (o.first_s is None or self.first is None) else self.first + o.first_s

    def _reset(self) -> None:
        self.outs, self.passes, self.first = [], 0, 0.0

    def row(self, oracle: list[list[int]]) -> dict[str, Any]:
        if self.failed is not None:
            return self.skipped()
        tokens, n = sum(len(o) for o in self.outs), len(self.outs)
        tau = round((tokens - n) / self.passes, 4) if self.passes > 0 else None
        row = {
            "key": self.key,
            "engine": self.peer.engine,
            "method": self.peer.label,
            "prompts": n,
            "tokens": tokens,
            "tau": tau,
            "seconds": round(self.seconds, 3),
            "tokens_per_s": round(tokens / self.seconds, 2),
            **split_columns(self.seconds, self.first, n, tokens),
            **self.cpu_columns(tokens),
            **self.peer.info,
        }
        return check_tokens(row, self.outs, oracle)


def peer_run(make: Callable[[], peers.Peer], key: str) -> Run | dict[str, Any]:
    """One peer's run, or a skipped row with the reason (missing package or converter, failed conversion)."""
    try:
        return PeerRun(key, make())
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

    def step_chain(self, seq: int, tokens: list[int]) -> list[int] | None:  # the engine's shortcuts, tapped
        return self._shortcut("step_chain", seq, tokens)

    def decode_greedy(self, seq: int, token: int, max_tokens: int, stop_ids=()) -> list[int] | None:  # noqa: ANN001
        return self._shortcut("decode_greedy", seq, token, max_tokens, stop_ids)

    def _shortcut(self, name: str, *args: Any) -> list[int] | None:
        if getattr(type(self._engine), name, None) is None:  # (None: it has none; the loop calls step)
            return None
        emitted: list[int] | None = getattr(self._engine, name)(*args)
        if emitted is not None:
            self.outputs[-1].extend(emitted)
        return emitted

    def step(self, seqs, drafts, sampling):  # noqa: ANN001, ANN201
        out = self._engine.step(seqs, drafts, sampling)
        self.outputs[-1].extend(out.emitted(0))
        if drafts[0].num_nodes > 1 or self.last_draft is None:
            self.last_draft = drafts[0]
        return out


class OurRun(Run):
    """One of our methods through `acceptance.MethodTally` (batch 1), then its verification estimate."""

    def __init__(self, dec: DecoderSetup, vocab: int, suffix: str = "", info: dict[str, Any] | None = None) -> None:
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
        reset = getattr(self.dec.make_drafter, "reset", None)  # a shared n-gram pool (NgramFactory) starts empty:
        if callable(reset):  # the warm-up prompt is the first timed one, which must not find itself there
            reset()

    def row(self, oracle: list[list[int]]) -> dict[str, Any]:
        if self.failed is not None:
            return {**self.skipped(), **self.info}
        row = self.tally.row()
        row.update(self.cpu_columns(row["tokens"]))
        row["key"] = row["method"] = self.key
        row["spec_method"], row["tuned"] = self.dec.method, self.tuned
        threads = getattr(self.dec.engine, "threads", None)
        row["threads"] = torch.get_num_threads() if threads is None else threads
        check_tokens(row, [t[: self.max_new] for t in self.tap.outputs], oracle)
        if self.tap.last_draft is not None:
            row.update(verify_estimate(self.tap.last_draft, self.vocab))
        return {**row, **self.info}


def tuned_run(t: Tuned, vocab: int) -> Run | dict[str, Any]:
    """Our engine built from a tuned overlay (cached like any recipe), or a skipped row with the reason."""
    info = {
        "tuned": True,
        "spec_method": t.spec_method,
        "setting": t.setting,
        "predicted_speedup": t.predicted,
        "overlay": str(t.overlay),
    }
    key = f"trtspec-ort {t.method} (tuned)"
    if t.skipped is not None:
        return {"key": key, "method": key, **info, "skipped": t.skipped}
    try:
        dec = build_decoder(t.recipe)
    except Exception as e:  # noqa: BLE001 - one overlay that cannot build never takes the benchmark down
        return {"key": key, "method": key, **info, "skipped": f"engine: {type(e).__name__}: {e}"}
    return OurRun(dec, vocab, " (tuned)", info)


def hf_runs(base: Path, lookup: int) -> list["PeerRun"]:
    """HF greedy (its outputs are the oracle) and HF prompt lookup, both with eos disabled, as peer runs."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32).eval()

    def runner(**extra: Any) -> Generate:
        def generate(ids: Sequence[int], n: int) -> peers.PeerOutput:
            x = torch.tensor([list(ids)])
            with torch.no_grad():
                out = model.generate(
                    x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, eos_token_id=None, **extra
                )  # eos off, like every row
            toks = out[0, len(ids) :].tolist()
            return peers.PeerOutput(toks, len(toks) - 1 if not extra else None)

        return generate

    variants: list[tuple[str, str, dict[str, Any]]] = [
        ("hf greedy", "hf greedy", {}),
        ("hf prompt-lookup", f"hf prompt-lookup(n=2,k={lookup})", {"prompt_lookup_num_tokens": lookup}),
    ]
    info = {"threads": torch.get_num_threads()}
    return [PeerRun(key, peers.Peer(label, "transformers", runner(**extra), info)) for key, label, extra in variants]
