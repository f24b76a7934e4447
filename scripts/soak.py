#!/usr/bin/env python3
"""Soak test of a served recipe (not part of the default test suite): 32 concurrent streams for 5 minutes with
random cancels, malformed requests and deadline expiries mixed in (devtools/bench/soak.py says what is checked).

    .venv/bin/python scripts/soak.py [RECIPE] [--streams 32] [--duration-s 300] [--out out/soak.json]

Exit status 0 when it passed: no unexpected error, server RSS growth after warm-up below 5 %, no request,
slot or KV row left in the server at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from devtools.bench.soak import SoakSettings, make_oracle, soak  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", nargs="?", default=str(REPO / "recipes" / "tiny-llama3-eagle2.yaml"))
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--duration-s", type=float, default=300.0)
    ap.add_argument("--warmup-s", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--cancel-rate",
        type=float,
        default=SoakSettings.p_cancel,
        help="share of requests their client cancels (gRPC stream cancel; default 0: tritonserver 2.51 "
        "segfaults within seconds of them, server issues 7368/8034, fixed after 2.51)",
    )
    ap.add_argument(
        "--disconnect-rate",
        type=float,
        default=SoakSettings.p_disconnect,
        help="share of requests sent as HTTP generate_stream whose client closes the connection after a "
        "few events (Triton cancels on the EOF; the gRPC cancel race is not involved)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "out" / "soak.json")
    a = ap.parse_args()
    from builder.recipe.loader import load_recipe
    from builder.serve.server import TritonServer, free_ports
    from builder.stages.decoders import cache_dir
    from builder.stages.runner import build

    loaded = load_recipe(a.recipe)
    repo = build(loaded, cache_dir(), until="repo").folder("repo")
    model = json.loads((repo / "trtspec-repo.json").read_text())["ensemble"]
    s = SoakSettings(
        streams=a.streams,
        duration_s=a.duration_s,
        warmup_s=min(a.warmup_s, a.duration_s / 3),
        seed=a.seed,
        p_cancel=a.cancel_rate,
        p_disconnect=a.disconnect_rate,
    )
    oracle = make_oracle(a.recipe, s.max_tokens)
    server = TritonServer(repo, ports=free_ports())  # explicit model control is the default (builder.serve.server)
    server.start()
    log = a.out.with_suffix(".tritonserver.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        server.wait_ready(180)
        result = soak(server, model, s, oracle)
    finally:
        if server.workdir is not None and server.log_path.is_file():
            shutil.copy2(server.log_path, log)  # (the server's own log, kept beside the results)
        server.stop()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    d = result["server"]
    print(
        f"\n{result['wall_s']} s, {a.streams} streams: sent {result['sent']}, as expected {result['ok']}, "
        f"unexpected {result['unexpected']}"
    )
    print(
        f"{result['requests_per_s']:.1f} requests/s, {result['good_tokens_per_s']:.1f} checked tokens/s; server: "
        f"{d['steps']:.0f} steps, mean batch {d['mean_batch'] or 0:.2f}, τ {d['tau'] or 0:.2f}, step {d['step_ms_mean'] or 0:.1f} ms, "
        f"errors {d['errors']}"
    )
    growth = result["rss_growth_after_warmup"]
    print(
        f"server RSS {result['rss_mib'][0][1]} → {result['rss_mib'][-1][1]} MiB (after warm-up: "
        f"{'–' if growth is None else f'{100 * growth:+.2f} %'}); left in the server: {result['left_in_server']}"
    )
    for line in result["unexpected_samples"]:
        print("  unexpected:", line)
    print(("PASSED" if result["passed"] else "FAILED") + f" — {a.out}, server log {log}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
