#!/usr/bin/env python3
"""How long a step's weights stay in the cache between steps (not a test): the cost of one plain step (T = 1) of
the tiny fixture right after the previous one, after a gap of busy-waiting, and after a T-node chain step.

    .venv/bin/python scripts/bench_gap.py [--gaps 0,0.25,0.5,1,2,4] [--after 3,8,16,24] [--samples 60]
        [--rounds 3] [--past 300] [--out out/bench_gap.json]

The tiny fixture's weights (19.5 MB fp32) fit in this CPU's L3 only while they are read again soon: on a host
whose L3 is shared with other tenants, lines we have not touched for a millisecond or two are gone. A busy-wait
touches nothing of ours and keeps the core running, so what a gap adds is the weights read back from memory —
the step after a long chain step pays it too (a chain step reads the weights once, at its start, over its
whole length). That is why the steps of a decoding loop, whose chains of mixed lengths follow one another, cost
more than the same steps timed back to back (`scripts/bench_step.py`, `trtspec tune`'s curve), and why runs on a
shared machine move with the neighbours' load. Each sample is one `step_chain` call (the engine's batch-1
shortcut); settings are interleaved over rounds, each on a fresh sequence after a `past`-token prompt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # devtools/ is not installed: imported from this checkout


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gaps", default="0,0.25,0.5,1,2,4", help="busy-wait before each plain step, ms")
    ap.add_argument("--after", default="3,8,16,24", help="chain lengths T run right before each plain step")
    ap.add_argument("--samples", type=int, default=60, help="plain steps per setting and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--past", type=int, default=300, help="prompt tokens before the steps")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_gap.json")
    args = ap.parse_args()
    try:
        gaps = [float(g) for g in args.gaps.split(",") if g]
        after = [int(t) for t in args.after.split(",") if t]
    except ValueError:
        print("bench_gap: --gaps takes numbers (ms), --after integers (nodes), comma-separated", file=sys.stderr)
        return 2
    if any(g < 0 for g in gaps) or any(not 2 <= t <= 64 for t in after) or args.samples < 1 or args.rounds < 1:
        print("bench_gap: gaps >= 0, chain lengths 2..64, samples and rounds >= 1", file=sys.stderr)
        return 2

    import numpy as np

    from builder.engines.step_curve import host_about
    from builder.model.loader import load_model
    from builder.speculative.protocols import SamplingBatch
    from devtools.bench.step import chain
    from devtools.ort_engines import target_engine

    model = load_model(ROOT / "tests" / "fixtures" / "tiny-llama3" / "base")
    longest = max(after, default=1)
    room = args.past + args.samples * (longest + 1) + 2 * longest + 8
    settings = [("gap", g) for g in gaps] + [("after", t) for t in after]
    times: dict[tuple[str, float], list[float]] = {s: [] for s in settings}
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, model.cfg.vocab_size, args.past).tolist()
    with tempfile.TemporaryDirectory(prefix="bench-gap-") as tmp:
        engine = target_engine(model, Path(tmp), max_seq_len=room, max_nodes=longest, variant="ort", threads=1)
        for _ in range(args.rounds):
            for kind, value in settings:
                (seq,), pre = engine.start([prompt], SamplingBatch.all_greedy(1, 1))
                root = int(pre.tokens[0])
                for t in {1, *after}:  # `step` first: it makes the bindings `step_chain` then reuses
                    res = engine.step([seq], [chain(t, root)], SamplingBatch.all_greedy(1, t))
                    root = int(res.tokens[0, int(res.accepted_len[0]) - 1])
                for _ in range(args.samples):
                    if kind == "gap":
                        _busy(value)
                    else:
                        root = engine.step_chain(seq, [root] * int(value))[-1]
                    t0 = time.perf_counter()
                    out = engine.step_chain(seq, [root])
                    times[(kind, value)].append(time.perf_counter() - t0)
                    root = out[-1]
                engine.release(seq)
    base = statistics.median(times[("gap", 0.0)]) if ("gap", 0.0) in times else None
    rows = []
    print("plain step of the tiny fixture (T = 1, ORT, 1 thread), median ms:")
    for kind, value in settings:
        ms = 1e3 * statistics.median(times[(kind, value)])
        label = f"after a {value:g} ms busy gap" if kind == "gap" else f"right after a {value}-node chain step"
        ratio = ms / (1e3 * base) if base else None
        rows.append({"setting": kind, "value": value, "ms": round(ms, 4), "x_back_to_back": ratio and round(ratio, 3)})
        print(f"  {label:38s} {ms:7.3f}" + (f"   ({ratio:.2f}x back to back)" if ratio else ""))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".tmp")
    tmp_out.write_text(
        json.dumps(
            {
                "benchmark": "bench_gap",
                "past": args.past,
                "samples": args.samples,
                "rounds": args.rounds,
                "rows": rows,
                "host": host_about(threads=1),
            },
            indent=2,
        )
        + "\n"
    )
    tmp_out.replace(args.out)
    print(f"JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
