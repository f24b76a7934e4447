"""The TensorRT-LLM memory plan per rank against an independent count: the bytes of the rank files the checkpoint
writer produces for the same scaled-down recipe (the tiny fixture + its EAGLE draft, TensorRT-LLM backend).

`trtllm-build` loads rank{N}.safetensors into the engine as they are (its `fuse_gate_mlp` concatenates fc and gate
without changing their size), so the per-rank weights of the engine are the tensors of the rank file: the plan's
components must sum to exactly the bytes of each rank's tensors (shape × itemsize from the file's header), and
each component to its tensors — including every EagleNet's own embedding table and LM head
(`tensorrt_llm/models/eagle/model.py` @ 89fd9b74: nothing is shared between the nets or with the base model), KV
heads duplicated when tp exceeds them (tp 4 over the fixture's 2), the FP8 scales and the KV cache scales.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from pathlib import Path

import pytest

from builder.plan.memory import plan_memory
from builder.plan.report import draft_architecture
from builder.recipe.loader import load_recipe
from builder.recipe.resolve import draft_levels, max_draft_len, resolve_architecture, tree_field
from builder.trtllm.checkpoint import CheckpointRequest, convert_checkpoint
from builder.trtllm.checkpoint.eagle import eagle_tree_numbers
from tests.unit.scratch import scratch_dir
from tests.unit.test_quantize_ptq import fixture_fp8

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "tiny-llama3"
RECIPE = REPO / "recipes" / "tiny-llama3-trtllm-eagle1.yaml"
ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1}


def header_bytes(path: Path) -> dict[str, int]:
    """Tensor name -> bytes, from the safetensors header alone (8-byte length, JSON)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8 : 8 + n])
    head.pop("__metadata__", None)
    return {k: math.prod(v["shape"]) * ITEMSIZE[v["dtype"]] for k, v in head.items()}


def component_of(name: str) -> str:
    if name.startswith("eagle_nets."):
        return "eagle_nets"
    if name.startswith("transformer.vocab_embedding"):
        return "embed_tokens"
    if name.startswith("lm_head"):
        return "lm_head"
    if name.endswith("layernorm.weight") or name == "transformer.ln_f.weight":
        return "norms"
    return "decoder"


@functools.lru_cache(maxsize=None)
def written(tp: int, fp8: bool, parallel: bool, levels: int, non_leaves: int, draft_len: int) -> Path:
    out = scratch_dir("trtspec-plan-ckpt-") / "ckpt"
    req = CheckpointRequest(
        FIX / "base",
        tp,
        1,
        "float16",
        "eagle",
        draft_dir=FIX / "eagle",
        max_draft_len=draft_len,
        num_eagle_layers=levels,
        max_non_leaves_per_layer=non_leaves,
        fp8_dir=fixture_fp8("fp8")[0] if fp8 else None,
        kv_cache_fp8=fp8,
        use_parallel_embedding=parallel,
    )
    convert_checkpoint(req, out)
    return out


@pytest.mark.parametrize("tp,fp8,parallel", [(1, False, False), (2, True, False), (2, True, True), (4, True, False)])
def test_plan_equals_the_rank_files_bytes(tp, fp8, parallel):
    sets = [f"parallelism.tp={tp}", f"target.gpus={tp}", f"trtllm.use_parallel_embedding={str(parallel).lower()}"]
    if fp8:
        sets += ["quantization.mode=fp8", "quantization.kv_cache=fp8"]
    loaded = load_recipe(RECIPE, sets)
    recipe = loaded.recipe
    arch = resolve_architecture(recipe, loaded.dir_of(("model", "checkpoint")))
    levels = draft_levels(recipe, loaded.dir_of(tree_field(recipe)))
    draft_len = max_draft_len(recipe, loaded.dir_of(tree_field(recipe)))
    plan = plan_memory(recipe, arch, draft_len, levels, draft_architecture(loaded))
    comps = {c.name.split(" ")[0]: c.bytes for c in plan.components}
    from builder.recipe.resolve import tree_choices_spec
    from builder.speculative.choices import load_choices

    depth, non_leaves = eagle_tree_numbers(load_choices(tree_choices_spec(recipe), loaded.dir_of(tree_field(recipe))))
    assert depth == levels  # the checkpoint stage's num_eagle_layers is the plan's EagleNet count
    folder = written(tp, fp8, parallel, levels, non_leaves, draft_len)
    for r in range(tp):
        got: dict[str, int] = {}
        for name, nbytes in header_bytes(folder / f"rank{r}.safetensors").items():
            got[component_of(name)] = got.get(component_of(name), 0) + nbytes
        assert got == comps, f"rank {r}"
        assert sum(got.values()) == plan.weight_bytes
    assert f"eagle_nets (× {levels})" in [c.name for c in plan.components]
