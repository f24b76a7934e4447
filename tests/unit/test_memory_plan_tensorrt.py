"""`trtspec plan` for trtspec's own engines (`builder.plan.own_engines`): weights, KV and scratch from the
engines' real dtypes and layout (per-slot contiguous KV: slots × CAP, not paged).

Two kinds of oracle: figures worked out by hand from the published Llama 3 architectures (inline), and what
the engines really hold — the initializers of the graphs the exporter writes (CPU form, and the GPU form in
bfloat16 with FP8 weights) and the KV buffer the ONNX Runtime engine allocates — for the tiny fixture.
"""

from __future__ import annotations

import json

import pytest
from onnx import TensorProto, numpy_helper

from builder.engines.ort.kv import KVBuffers
from builder.export.contract import Precision
from builder.export.target import build_target
from builder.model.loader import load_model
from builder.quantize.checkpoint import read_fp8_checkpoint
from builder.recipe.loader import load_recipe
from builder.speculative import registry
from builder.speculative.method import DRAFT_GRAPH
from builder.stages.export import capacity
from builder.stages.parts import Parts
from tests.unit.recipe_helpers import run
from tests.unit.test_quantize_ptq import fixture_fp8

GIB = 2**30
H100_BYTES = 81559 * 2**20  # nvidia-smi total of an H100 SXM 80GB
LAYER_8B = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336  # q, o + k, v + MLP = 218,103,808
LAYER_70B = 8192 * 8192 * 2 + 8192 * 1024 * 2 + 3 * 8192 * 28672  # = 855,638,016


def plan(recipe: str, *sets: str, table: bool = False):
    args = ["plan", recipe] if table else ["plan", "--json", recipe]
    for s in sets:
        args += ["--set", s]
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    return result.output if table else json.loads(result.stdout)


def test_llama3_8b_fp8_h100_by_hand():
    r = plan("recipes/llama3-8b-1xh100-fp8-none.yaml")
    m = r["memory"]
    cap = 4096 + 24  # max_seq_len + the default Lookahead's 1 + 23 nodes (more than none's 1)
    scales = (
        32 * ((32 + 2 * 8) * 128 + 2 * 14336 + 2 + 4) * 2
    )  # per layer: QKV and gate/up per column, o, down, 4 inputs
    decoder = 32 * LAYER_8B * 1 + scales  # FP8: one byte per weight
    norms, embed, rope = (2 * 32 + 1) * 4096 * 2, 128256 * 4096 * 2, cap * 128 * 2  # bf16
    comps = {c["name"]: (c["dtype"], c["bytes"]) for c in m["components"]}
    assert comps == {
        "decoder": ("fp8", decoder),
        "norms": ("bf16", norms),
        "embed_tokens": ("bf16", embed),
        "lm_head": ("bf16", embed),
        "rope tables": ("bf16", rope),
    }  # greedy only: one engine
    assert m["weight_bytes"] == 6_979_321_856 + 2_228_608 + 532_480 + 2 * 1_050_673_152 + 1_054_720 == 9_084_483_968
    # bf16 KV: TensorRT's KV-cache update keeps no FP8 cache (validate refuses kv_cache: fp8 on this backend)
    assert m["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131_072
    assert m["kv_budget_bytes"] == 16 * cap * 131_072 == 8_640_266_240  # 16 slots × CAP, allocated up front
    assert (m["concurrent_sequences"], m["tokens_per_sequence"], m["kv_tokens"]) == (16, cap, 16 * cap)
    row = 2 * (2 * 4096 + max(48 * 128 + 32 * 128, 3 * 14336, 3 * 4096))  # residual + norm + the MLP's [3I], bf16
    step = 16 * 24 * (row + cap * 2) + 16 * 24 * 128256 * (2 + 4)  # 24 nodes: rows, mask; logits bf16 + fp32
    prefill = 16 * 2048 * (row + cap * 2) + 16 * 1 * 128256 * 6  # 2048 prompt tokens, one verify node
    assert m["scratch_bytes"] == {"greedy/step": step, "greedy/prefill": prefill}
    assert (step, prefill) == (337_987_584, 3_637_764_096)
    # the runtime's device I/O slots (every non-cache tensor at its largest: T* = max(2048 prompt, 24 nodes),
    # each rounded up to 256 bytes), held again in pinned host memory
    up = lambda n: -(-n // 256) * 256  # noqa: E731
    inputs = 2 * 16 * 2048 * 8 + 16 * 2048 * 2048 + 2 * up(16 * 8) + 16 * 24 * 8 + 16 * 24 * 24 * 4
    outputs = 2 * up(16 * 4) + 16 * 24 * 4 + 16 * 24 * 8 + 16 * 2048 * 4096 * 2  # ..., hidden [B, T*, C] bf16
    assert m["io_slot_bytes"] == {"greedy": inputs + outputs} and m["pinned_host_bytes"] == inputs + outputs
    # one arena shared by both profiles' contexts: the larger profile's scratch
    assert m["activation_bytes"] == max(step, prefill) + inputs + outputs
    assert m["headroom_bytes"] == H100_BYTES - 9_084_483_968 - 2 * GIB - prefill - inputs - outputs - 8_640_266_240
    assert m["fits"] and "per-slot contiguous" in m["layout"] and "float8e4m3fn" not in m["layout"]


def test_llama3_70b_fp8_h200_eagle_by_hand():
    """The EAGLE draft engine holds its own embedding and the target's LM head; KV in bfloat16 (both), 12 slots
    (the recipe's max_batch_size: 16 do not fit beside the draft's prefill scratch with a bf16 cache)."""
    m = plan("recipes/llama3-70b-tp1-h200-fp8-eagle.yaml")["memory"]
    cap = cap_e = 4096 + 61  # 60 tree nodes + root; the draft: 6 levels × top-10 tentative slots + 1
    comps = {c["name"]: c["bytes"] for c in m["components"]}
    assert comps["decoder"] == 80 * LAYER_70B + 80 * (80 * 128 + 2 * 28672 + 6) * 2 == 68_461_855_680
    assert comps["eagle_draft"] == (2 * 8192 * 8192 + 8192 + LAYER_70B + 2 * 8192) * 2  # fc + bias, layer, 2 norms
    assert comps["eagle embed_tokens"] == comps["eagle lm_head (the target's)"] == 128256 * 8192 * 2
    assert comps["eagle rope tables"] == cap_e * 128 * 2
    assert (
        m["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 2 == 327_680 and m["draft_kv_bytes_per_token"] == 2 * 8 * 128 * 2
    )
    assert m["kv_budget_bytes"] == 12 * (cap * 327_680 + cap_e * 4096) == 16_550_313_984
    row = 2 * (2 * 8192 + 3 * 28672)
    # the draft graph's prefill computes log-softmax top-K at every row: logits bf16 + fp32 + log-probs fp32
    assert m["scratch_bytes"]["eagle/prefill"] == 12 * 2048 * (row + cap_e * 2 + 128256 * 10) == 36_757_684_224
    assert m["fits"]


def test_bf16_70b_on_one_h200_does_not_fit():
    result = run("plan", "recipes/llama3-70b-tp1-h200-fp8-none.yaml", "--set", "quantization.mode=none")
    assert result.exit_code == 2  # 80 · 855,638,016 · 2 B = 127.5 GiB of weights + 16 slots of bf16 KV + scratch
    assert (
        "do not fit" in result.stderr and "slots of 4120 tokens" in result.stderr and "Traceback" not in result.stderr
    )


def test_the_table_says_what_it_assumed():
    out = plan("recipes/llama3-8b-1xh100-fp8-eagle.yaml", table=True)
    assert "Assumed: tensorrt engines (greedy, eagle)" in out and "not paged" in out
    assert "KV allocated: 16 slots" in out and "scratch eagle/prefill" in out


@pytest.mark.parametrize(
    "recipe",
    [
        "llama3-8b-1xh100-fp8-none",
        "llama3-8b-1xh100-fp8-medusa",
        "llama3-8b-1xh100-fp8-eagle",
        "llama3-8b-1xh100-fp8-lookahead",
        "tiny-llama3-eagle1",
        "tiny-llama3-eagle2",
    ],
)
def test_capacities_are_the_export_stages(recipe):
    """CAP and CAP_e as the export stage sizes the graphs (`builder.stages.export`)."""
    loaded = load_recipe(f"recipes/{recipe}.yaml")
    m = plan(f"recipes/{recipe}.yaml")["memory"]
    config = Parts(loaded, loaded.recipe.speculative.method).drafter_config()
    assert m["tokens_per_sequence"] == capacity(loaded.recipe.build.max_seq_len, config)
    if registry.of(config).exports == DRAFT_GRAPH:  # CAP_e as the export stage sizes the draft graph
        cap_e = loaded.recipe.build.max_seq_len + registry.facts(config).tentative + 1
        assert f"EAGLE draft [{loaded.recipe.build.max_batch_size}, " in m["layout"] and f", {cap_e}, " in m["layout"]
    else:
        assert "EAGLE draft" not in m["layout"] and m["draft_kv_bytes_per_token"] == 0


def _initializer_bytes(proto) -> dict[int, int]:
    """Bytes of the graph's weight-sized initializers (> 1 KiB: what the exporter streams to the data file) by type."""
    out: dict[int, int] = {}
    for t in proto.graph.initializer:
        nbytes = numpy_helper.to_array(t).nbytes
        if nbytes > 1024:
            out[t.data_type] = out.get(t.data_type, 0) + nbytes
    return out


def test_cpu_plan_is_what_onnx_runtime_holds():
    """tiny-llama3-fp8 (cpu): the float32 target graph's weights and the engine's KV buffer, allocated."""
    loaded = load_recipe("recipes/tiny-llama3-fp8.yaml")
    m = plan("recipes/tiny-llama3-fp8.yaml")["memory"]
    model = load_model(Parts(loaded, "eagle").base_dir(), "float32")
    cfg, cap = model.cfg, m["tokens_per_sequence"]
    proto = build_target(model, variant="standard", mode="greedy", max_seq_len=cap)
    target = {"decoder", "norms", "embed_tokens", "lm_head", "rope tables"}
    planned = sum(c["bytes"] for c in m["components"] if c["name"] in target)
    small = sum(c["bytes"] for c in m["components"] if c["name"] == "norms")  # [C] norm weights: 1 KiB each
    assert _initializer_bytes(proto) == {TensorProto.FLOAT: planned - small}
    kv = KVBuffers(cfg.num_hidden_layers, 4, cfg.num_key_value_heads, cap, cfg.head_dim)  # what OrtEngine allocates
    assert m["kv_bytes_per_token"] * 4 * cap == kv.nbytes
    assert m["kv_budget_bytes"] == kv.nbytes + 4 * (cap - 8) * m["draft_kv_bytes_per_token"]  # draft: 12 nodes < 15


def test_gpu_plan_is_what_the_bfloat16_fp8_graph_holds():
    """The tiny fixture as a GPU recipe (bf16, FP8 weights, bf16 KV — the own TensorRT backend keeps no FP8 KV):
    FP8 bytes exactly, bfloat16 bytes up to the scales (counted per output column: at most)."""
    m = plan(
        "recipes/tiny-llama3-fp8.yaml",
        "target.device=h100",
        "target.backend=tensorrt",
        "model.dtype=bf16",
        "quantization.kv_cache=model_dtype",
    )["memory"]
    ckpt = read_fp8_checkpoint(fixture_fp8()[0])
    proto = build_target(
        ckpt.model,
        variant="standard",
        mode="greedy",
        max_seq_len=m["tokens_per_sequence"],
        fp8=ckpt.spec,
        precision=Precision("bfloat16", "bfloat16"),
    )
    have = _initializer_bytes(proto)
    comps = {c["name"]: c for c in m["components"]}
    assert have[TensorProto.FLOAT8E4M3FN] == comps["decoder"]["params"]  # one byte per weight
    bf16 = sum(comps[n]["bytes"] for n in ("embed_tokens", "lm_head", "rope tables"))
    assert bf16 <= have[TensorProto.BFLOAT16] <= bf16 + comps["decoder"]["bytes"] - comps["decoder"]["params"]
    assert set(have) == {TensorProto.FLOAT8E4M3FN, TensorProto.BFLOAT16}
    caches = {v.type.tensor_type.elem_type for v in proto.graph.input if v.name.startswith(("past_key", "past_value"))}
    assert caches == {TensorProto.BFLOAT16}  # two bytes per element, as planned
    cfg = ckpt.cfg
    assert m["kv_bytes_per_token"] == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2
