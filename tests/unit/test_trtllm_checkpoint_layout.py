"""The TensorRT-LLM checkpoint writer's layout against upstream's own rules (no TensorRT-LLM here).

Oracle (3) of `test_trtllm_checkpoint.py`: upstream's rules, written as data with the file and commit they come
from (TensorRT-LLM 1.2.0rc2), checked against the raw rank files (read here with plain safetensors, not with
the reader under test): pipeline layer ranges and rank groups (`mapping.py`), vocabulary padding, tensor names
and shapes per rank, KV-head duplication, the crossed MLP names and linear splits, the LM head's zero rows, the
draft tensors' places and config.json's fields; and the streaming writer's files are well-formed safetensors.
The shared sources and conversions are in `trtllm_ckpt_helpers.py`.
"""

from __future__ import annotations

import json
import struct

import pytest
import torch

from builder.trtllm.checkpoint.mapping import Mapping, pad_vocab_size, pp_layer_ranges
from tests.unit.trtllm_ckpt_helpers import TRTLLM_1_2_RC2, converted, hf, raw_rank

# ---------------------------------------------------------------- (3) upstream's rules as data

MAPPING_PY = f"NVIDIA/TensorRT-LLM tensorrt_llm/mapping.py @ {TRTLLM_1_2_RC2}"


@pytest.mark.parametrize("num_layers", [1, 2, 3, 4, 7, 32, 80, 126])
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 8])
def test_pp_layers_follow_upstream_tensor_split(num_layers, pp):
    """MappingBase.pp_layers: `torch.tensor_split(torch.arange(num_layers), pp_size)[pp_rank]` (MAPPING_PY)."""
    if pp > num_layers:
        with pytest.raises(ValueError):
            pp_layer_ranges(num_layers, pp)
        return
    upstream = [t.tolist() for t in torch.tensor_split(torch.arange(num_layers), pp)]
    assert pp_layer_ranges(num_layers, pp) == upstream
    for rank in range(2 * pp):  # rank = pp_rank * tp + tp_rank (MpiTopology, tp fastest)
        m = Mapping(2, pp, rank)
        assert (m.tp_rank, m.pp_rank) == (rank % 2, rank // 2) and m.pp_layers(num_layers) == upstream[rank // 2]


def test_mapping_groups_of_the_upstream_docstring():
    """`Mapping` docstring (MAPPING_PY): 8 GPUs, tp 4, pp 2 -> tp groups [0..3], [4..7]; pp groups [0,4] … [3,7]."""
    ranks = Mapping(4, 2).ranks()
    assert [[m.rank for m in ranks if m.pp_rank == p] for p in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [[m.rank for m in ranks if m.tp_rank == t] for t in range(4)] == [[0, 4], [1, 5], [2, 6], [3, 7]]


@pytest.mark.parametrize(
    "vocab,tp,padded",
    [
        (128256, 1, 128256),
        (128256, 8, 128256),
        (32000, 3, 32001),
        (98, 4, 100),
        (98, 2, 98),
        (4096, 4, 4096),
        (151936, 7, 151942),
    ],
)
def test_vocab_padding_is_upstreams(vocab, tp, padded):
    """`tensorrt_llm/_utils.py` pad_vocab_size: int(math.ceil(vocab_size / tp_size) * tp_size)."""
    assert pad_vocab_size(vocab, tp) == padded


def _expected_names(L_first: int, L_last: int, first: bool, last: bool) -> set[str]:
    per_layer = [
        "input_layernorm.weight",
        "attention.qkv.weight",
        "attention.dense.weight",
        "mlp.fc.weight",
        "mlp.gate.weight",
        "mlp.proj.weight",
        "post_layernorm.weight",
    ]
    names = {f"transformer.layers.{i}.{n}" for i in range(L_first if first else L_last) for n in per_layer}
    if first:
        names.add("transformer.vocab_embedding.weight")
    if last:
        names |= {"transformer.ln_f.weight", "lm_head.weight"}
    return names


def test_rank_files_hold_upstreams_names_and_shapes():
    """Random target (3 layers, C 64, 4 q heads / 1 KV head, D 16, I 128, V 98) at tp 2 × pp 2.

    Upstream (`models/llama/model.py`, `model_weights_loader.py` `update_key_mapping`: local index i of a
    pp rank reads HF layer pp_layers[i]): pp rank 0 = ranks 0, 1 with layers 0, 1 + the embedding; pp rank
    1 = ranks 2, 3 with HF layer 2 as local layer 0 + ln_f + lm_head. Shapes: qkv (4/2 + 2·1)·16 = 64 rows
    (the single KV head duplicated), dense [64, 32], fc/gate [64, 64], proj [64, 64], lm_head [49, 64].
    """
    folder, _ = converted("random", 2, 2, "none")
    for rank in range(4):
        t = raw_rank(folder, rank)
        assert set(t) == _expected_names(2, 1, rank < 2, rank >= 2), rank
        assert tuple(t["transformer.layers.0.attention.qkv.weight"].shape) == (64, 64)
        assert tuple(t["transformer.layers.0.attention.dense.weight"].shape) == (64, 32)
        assert tuple(t["transformer.layers.0.mlp.fc.weight"].shape) == (64, 64)
        assert tuple(t["transformer.layers.0.mlp.proj.weight"].shape) == (64, 64)
        if rank >= 2:
            assert tuple(t["lm_head.weight"].shape) == (49, 64)
            hf_layer2 = hf("random")[0].model.layers[2].input_layernorm.weight
            assert torch.equal(t["transformer.layers.0.input_layernorm.weight"], hf_layer2)  # renumbered, not global


def test_kv_heads_are_duplicated_as_upstream_dup_kv_weight():
    """`models/convert_utils.py` dup_kv_weight: heads repeated in place [h0 h0 h1 h1]; rank r gets head r // (tp / KV).

    Fixture (8 q / 2 KV heads, D 32) at tp 4: each rank's qkv = 2 q heads, then k and v of HF head r // 2."""
    folder, _ = converted("fixture", 4, 1, "none")
    attn = hf("fixture")[0].model.layers[1].self_attn
    D = 32
    for r in range(4):
        qkv = raw_rank(folder, r)["transformer.layers.1.attention.qkv.weight"]
        assert qkv.shape[0] == (2 + 1 + 1) * D
        assert torch.equal(qkv[: 2 * D], attn.q_proj.weight[r * 2 * D : (r + 1) * 2 * D])
        assert torch.equal(qkv[2 * D : 3 * D], attn.k_proj.weight[(r // 2) * D : (r // 2 + 1) * D])
        assert torch.equal(qkv[3 * D :], attn.v_proj.weight[(r // 2) * D : (r // 2 + 1) * D])


def test_mlp_names_are_crossed_and_splits_follow_linear_kinds():
    """`models/llama/convert.py` get_prefix_and_param_name_map: "mlp.gate": "mlp.up_proj", "mlp.fc":
    "mlp.gate_proj"; ColumnLinear splits rows (tp_dim 0), RowLinear columns (tp_dim 1) — `layers/linear.py`."""
    folder, _ = converted("fixture", 2, 1, "none")
    layer = hf("fixture")[0].model.layers[0]
    I, C = 688, 256
    for r in range(2):
        t = {k.removeprefix("transformer.layers.0."): v for k, v in raw_rank(folder, r).items()}
        rows, cols = slice(r * I // 2, (r + 1) * I // 2), slice(r * C // 2, (r + 1) * C // 2)
        assert torch.equal(t["mlp.fc.weight"], layer.mlp.gate_proj.weight[rows])
        assert torch.equal(t["mlp.gate.weight"], layer.mlp.up_proj.weight[rows])
        assert torch.equal(t["mlp.proj.weight"], layer.mlp.down_proj.weight[:, rows])
        assert torch.equal(t["attention.dense.weight"], layer.self_attn.o_proj.weight[:, cols])


def test_lm_head_rows_are_padded_with_zeros_on_the_last_rank():
    """V 98 at tp 4: pad_vocab_size 100, 25 rows a rank; rank 3 holds HF rows 75..97 and two zero rows."""
    folder, _ = converted("random", 4, 1, "none")
    head = raw_rank(folder, 3)["lm_head.weight"]
    assert head.shape[0] == 25
    assert torch.equal(head[:23], hf("random")[0].lm_head.weight[75:]) and not head[23:].any()


def test_draft_tensors_sit_where_upstream_puts_them():
    """Medusa heads on every rank (`models/medusa/model.py` builds them on every rank), split on rows;
    `num_eagle_layers` EagleNets `eagle_nets.{i}.drafter…` + `lm_head` (`models/eagle/model.py`)."""
    folder, _ = converted("fixture", 2, 2, "medusa")
    for rank in range(4):
        t = raw_rank(folder, rank)
        assert tuple(t["medusa_heads.4.medusa_layers.0.linear.weight"].shape) == (128, 256)
        assert tuple(t["medusa_heads.4.medusa_layers.0.linear.bias"].shape) == (128,)
        assert tuple(t["medusa_heads.4.lm_head.weight"].shape) == (2048, 256)
    folder, _ = converted("fixture", 2, 1, "eagle1")
    t = raw_rank(folder, 1)
    nets = {k.split(".")[1] for k in t if k.startswith("eagle_nets.")}
    assert nets == {"0", "1", "2"}
    assert "eagle_nets.0.drafter.layers.0.input_layernorm.weight" not in t  # first draft layer: no input norm
    assert tuple(t["eagle_nets.2.drafter.fc.weight"].shape) == (128, 512)
    assert tuple(t["eagle_nets.2.drafter.fc.bias"].shape) == (128,)
    assert "eagle_nets.0.drafter.ln_f.weight" not in t and "eagle_nets.0.lm_head.weight" in t


LLAMA_KEYS = {  # PretrainedConfig.__init__ (modeling_utils.py @ 1.2.0rc2) + LLaMAConfig (llama/config.py @ 89fd9b74)
    "architecture",
    "dtype",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "hidden_act",
    "logits_dtype",
    "norm_epsilon",
    "runtime_defaults",
    "position_embedding_type",
    "num_key_value_heads",
    "intermediate_size",
    "max_position_embeddings",
    "mapping",
    "quantization",
    "use_parallel_embedding",
    "embedding_sharding_dim",
    "head_size",
    "qk_layernorm",
    "rotary_embedding_dim",
    "mlp_bias",
    "attn_bias",
    "rotary_base",
    "rotary_scaling",
    "residual_mlp",
    "disable_weight_only_quant_plugin",
    "remove_duplicated_kv_heads",
    "fc_after_embed",
    "use_input_layernorm_in_first_layer",
    "use_last_layernorm",
    "layer_idx_offset",
    "embedding_multiplier",
    "attention_multiplier",
    "residual_multiplier",
    "output_multiplier_scale",
    "has_partial_lora_mask",
    "tie_word_embeddings",
}
MAPPING_KEYS = {
    "world_size",
    "gpus_per_node",
    "cp_size",
    "tp_size",
    "pp_size",
    "moe_tp_size",
    "moe_cluster_size",
    "moe_ep_size",
    "attn_tp_size",
    "attn_cp_size",
    "cp_config",
    "enable_attention_dp",
    "enable_lm_head_tp_in_adp",
}  # MappingBase.to_dict() minus rank, MAPPING_PY
QUANT_KEYS = {
    "quant_algo",
    "kv_cache_quant_algo",
    "group_size",
    "smoothquant_val",
    "clamp_val",
    "use_meta_recipe",
    "has_zero_point",
    "pre_quant_scale",
    "exclude_modules",
    "mamba_ssm_cache_dtype",
}  # QuantConfig (modeling_utils.py @ 1.2.0rc2)


@pytest.mark.parametrize(
    "method,arch,extra",
    [
        ("none", "LlamaForCausalLM", set()),
        ("lookahead", "LlamaForCausalLM", set()),
        ("medusa", "MedusaForCausalLM", {"num_medusa_heads", "num_medusa_layers", "max_draft_len"}),
        (
            "eagle1",
            "EagleForCausalLM",
            {"num_eagle_layers", "max_non_leaves_per_layer", "max_draft_len", "eagle_net_config", "head_dim"},
        ),
    ],
)
def test_config_json_has_upstreams_fields(method, arch, extra):
    folder, facts = converted("random", 2, 1, method)
    c = json.loads((folder / "config.json").read_text())
    assert set(c) == LLAMA_KEYS | extra and c["architecture"] == arch == facts["architecture"]
    assert set(c["mapping"]) == MAPPING_KEYS and (c["mapping"]["tp_size"], c["mapping"]["world_size"]) == (2, 2)
    assert set(c["quantization"]) == QUANT_KEYS and c["quantization"]["quant_algo"] is None
    assert c["rotary_scaling"] == {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
        "rope_type": "llama3",
    }
    assert (c["head_size"], c["num_key_value_heads"], c["vocab_size"]) == (16, 1, 98)
    assert c["position_embedding_type"] == "rope_gpt_neox" and c["hidden_act"] == "silu"
    if method == "medusa":
        assert (c["num_medusa_heads"], c["num_medusa_layers"], c["max_draft_len"]) == (5, 1, 12)
    if method == "eagle1":
        assert (c["num_eagle_layers"], c["max_non_leaves_per_layer"], c["max_draft_len"]) == (3, 3, 12)
        net = c["eagle_net_config"]
        assert set(net) == LLAMA_KEYS | {"head_dim"} and net["num_hidden_layers"] == 1
        # what EagleForCausalLM.__init__ (eagle/model.py @ 89fd9b74) sets on the eagle_net_config that
        # examples/eagle/convert_checkpoint.py (@ 65b31db1) then saves: not LLaMAConfig's defaults
        assert (net["fc_after_embed"], net["use_input_layernorm_in_first_layer"], net["use_last_layernorm"]) == (
            True,
            False,
            False,
        )
        assert net["layer_idx_offset"] == c["num_hidden_layers"] == 3  # the random target: 3 layers
        assert set(net["mapping"]) == MAPPING_KEYS
        assert (net["mapping"]["tp_size"], net["mapping"]["pp_size"], net["mapping"]["world_size"]) == (2, 1, 2)


# ---------------------------------------------------------------- the streaming writer's files


def test_rank_files_are_well_formed_safetensors():
    """8-byte LE header length, JSON header padded to 8, offsets contiguous from 0 to the end of the file."""
    from safetensors import safe_open

    folder, facts = converted("fixture", 2, 2, "medusa")
    for r in facts["ranks"]:
        raw = (folder / r["file"]).read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        header.pop("__metadata__")
        spans = sorted(v["data_offsets"] for v in header.values())
        assert n % 8 == 0 and spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert 8 + n + spans[-1][1] == len(raw) == r["bytes"]
        with safe_open(str(folder / r["file"]), framework="pt") as f:
            assert set(f.keys()) == set(header) and len(header) == r["tensors"]
