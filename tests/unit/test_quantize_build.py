"""`trtspec build` of the FP8 tiny recipe end to end: quantize (modelopt) → export (Q/DQ) → engine (ORT),
then `trtspec generate` from the cache. The quality report must exist and be complete; its greedy
agreement with fp32 is reported, not asserted (FP8 is another model: diverging tokens are expected).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from builder.stages.manifest import Manifest

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "tiny-llama3-fp8.yaml")


def trtspec(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "builder.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "TRTSPEC_CACHE_DIR": str(cache)},
    )


def test_fp8_recipe_builds_reports_and_generates(tmp_path: Path) -> None:
    r = trtspec("build", RECIPE, "--cache-dir", str(tmp_path), "--json", cache=tmp_path)
    assert r.returncode == 0, r.stderr
    stages = json.loads(r.stdout)["stages"]
    assert [s["stage"] for s in stages][:4] == ["load", "quantize", "export", "engine"]
    folders = {s["stage"]: Path(s["output"]) for s in stages}
    for folder in folders.values():
        m = Manifest.read(folder)
        assert m is not None and m.problems(folder, hashes=True) == []
    q = json.loads((folders["quantize"] / "hf_quant_config.json").read_text())["quantization"]
    assert q["quant_algo"] == "FP8" and q["kv_cache_quant_algo"] == "FP8"
    import torch

    info = json.loads((folders["quantize"] / "quantize.json").read_text())  # calibrated where this host allows
    where = "cuda" if torch.cuda.is_available() else "cpu"  # the recipe's model.dtype is fp32 either way
    assert (
        info["source"] == "calibrated"
        and (info["placement"]["device"], info["placement"]["dtype"]) == (where, "float32")
        and info["placement"]["fits"]
    )
    assert info["modelopt"]["supported"] == ">=0.37,<0.48" and info["modelopt"]["config_form"] == "list"
    report = json.loads((folders["export"] / "quality.json").read_text())
    assert (folders["export"] / "quality.md").read_text().startswith("# FP8 quality")
    assert report["num_prompts"] >= 20 and all(v > 1 for v in report["perplexity"].values())
    greedy = report["greedy"]
    assert 0 <= greedy["token_agreement"] <= 1 and len(greedy["first_divergence"]) == report["num_prompts"]
    assert set(report["methods"]) == {
        "none",
        "lookahead(W=4,N=4,G=4)",
        "eagle-2(V=1024)",
    }  # the recipe drafts over 1024 tokens
    for row in report["methods"].values():
        assert row["fp32"]["tau"] >= 1 and row["fp8"]["tau"] >= 1
    print(
        f"FP8 vs fp32: perplexity {report['perplexity']}, greedy agreement {greedy['token_agreement']}, "
        f"τ {[(m, r['fp32']['tau'], r['fp8']['tau']) for m, r in report['methods'].items()]}"
    )
    g = trtspec("generate", RECIPE, "--prompt", "def add(a, b):", "--max-new-tokens", "16", "--json", cache=tmp_path)
    assert g.returncode == 0, g.stderr
    out = json.loads(g.stdout)
    assert out["method"] == "eagle-2(V=1024)" and len(out["token_ids"]) == 16
