#!/usr/bin/env python3
"""One EAGLE draft call, session only (not a test): what a draft level costs with its weights in the
last-level cache (warm: the previous call was the same graph's) and without (cold: 3 × the LLC streamed
between calls, as a target step's weights do), per frontier size F. The floor of `draft ms / step`.

    .venv/bin/python scripts/bench_draft_call.py [RECIPE] [--frontiers 1,2,3,4,6,8] [--past 300] [--runs 100]
        [--out out/bench_draft_call.json]

RECIPE: an EAGLE recipe (default recipes/regime-llama3-eagle1.yaml), built up to its engine (cached). The
session is made as the engine makes it (`builder.engines.ort.session.make_session`: one thread, per-head
GroupQueryAttention); inputs: one sequence, `past` committed slots, F new nodes attending the F−1 before
them and themselves. Warm and cold calls alternate per F; medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # devtools/ is not installed: imported from this checkout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "regime-llama3-eagle1.yaml"))
    ap.add_argument("--frontiers", default="1,2,3,4,6,8")
    ap.add_argument("--past", type=int, default=300)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench_draft_call.json")
    args = ap.parse_args()

    from builder.engines.ort.session import make_session
    from builder.recipe.loader import load_recipe
    from builder.stages.decoders import cache_dir
    from builder.stages.runner import build
    from builder.timing import alternate, markdown_table
    from devtools.fixture.regime import last_level_cache

    folder = build(load_recipe(args.recipe), cache_dir(), until="engine").folder("engine")
    meta = json.loads((folder / "engine.json").read_text(encoding="utf-8"))
    e = meta.get("eagle")
    if not e:
        ap.error(f"{args.recipe} builds no EAGLE draft graph")
    graph = folder / e["graph"]
    session = make_session(graph)
    weights = sum(p.stat().st_size for p in graph.parent.glob(graph.stem.split(".")[0] + "*.data"))
    llc = last_level_cache() or 32 << 20
    flush = np.ones(3 * llc // 8, np.float64)  # streamed between cold calls
    rng = np.random.default_rng(0)
    kv, d, cap, c = e["kv_heads"], e["head_dim"], e["capacity"], e["hidden"]
    caches = {
        f"past_{kind}_{i}": rng.standard_normal((1, kv, cap, d)).astype(np.float32)
        for i in range(e["layers"])
        for kind in ("key", "value")
    }
    rows = []
    for f in [int(x) for x in args.frontiers.split(",") if x]:
        b = session.io_binding()
        x = {
            "tokens": rng.integers(0, 1000, (1, f)),
            "hidden_in": rng.standard_normal((1, f, c)).astype(np.float32),
            "position_ids": np.full((1, f), args.past, np.int64),
            "past_len": np.array([args.past]),
            "write_offset": np.zeros(1, np.int64),
            "num_new": np.array([f]),
            "tree_mask": np.tril(np.ones((1, f, f), bool)),
        }
        if any(i.name == "out_rows" for i in session.get_inputs()):  # (every row out, as an expand asks)
            x["out_rows"] = np.arange(f)[None]
        for k, v in {**x, **caches}.items():
            b.bind_cpu_input(k, v)
        for k, v in caches.items():
            b.bind_output(k.replace("past_", "present_"), "cpu", 0, np.float32, v.shape, v.ctypes.data)
        for o in ("hidden_out", "topk_tokens", "topk_logprobs"):
            b.bind_output(o, "cpu")
        for _ in range(5):
            session.run_with_iobinding(b)
        call = lambda: session.run_with_iobinding(b)  # noqa: E731
        times = alternate({"warm": call, "cold": call}, args.runs, before={"cold": flush.sum})  # cold: after a flush
        warm, cold = times["warm"], times["cold"]
        rows.append(
            {
                "F": f,
                "warm_ms": round(1e3 * statistics.median(warm), 3),
                "cold_ms": round(1e3 * statistics.median(cold), 3),
            }
        )
    report = {
        "benchmark": "bench_draft_call",
        "recipe": args.recipe,
        "graph": str(graph),
        "weights_bytes": weights,
        "llc_bytes": llc,
        "past": args.past,
        "runs": args.runs,
        "rows": rows,
    }
    print(
        f"EAGLE draft call, session only: weights file {weights / 2**20:.1f} MiB (the embedding's rows read as needed), "
        f"LLC {llc / 2**20:.0f} MiB, past {args.past}, median of {args.runs}\n"
    )
    cells = [(r["F"], f"{r['warm_ms']:.3f}", f"{r['cold_ms']:.3f}", f"{r['cold_ms'] / r['warm_ms']:.2f}") for r in rows]
    print("\n".join(markdown_table(("F", "warm ms", "cold ms", "cold / warm"), cells)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
