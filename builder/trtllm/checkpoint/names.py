"""The tensors of one rank file: TensorRT-LLM names, per-rank shapes, dtypes, and where each comes from.

Names and splits as TensorRT-LLM 1.2.x writes them (`LLaMAForCausalLM.from_hugging_face` → unified
`ModelWeightsLoader` → `save_checkpoint`):
* `tensorrt_llm/models/model_weights_loader.py`: the HF → TRT-LLM vocabulary — transformer ← model,
  vocab_embedding ← embed_tokens, ln_f ← norm, attention ← self_attn, qkv ← [q_proj, k_proj, v_proj],
  dense ← o_proj, **gate ← up_proj, fc ← gate_proj** (crossed, also in `models/llama/convert.py`
  `get_prefix_and_param_name_map`: "mlp.gate": "mlp.up_proj", "mlp.fc": "mlp.gate_proj"), proj ← down_proj,
  post_layernorm ← post_attention_layernorm, kv_cache_scaling_factor ← [k_proj.k_scale, v_proj.v_scale].
  With pp > 1, local layer i of a rank reads global HF layer pp_layers[i]: rank files are renumbered from 0.
* `tensorrt_llm/layers/linear.py` `Linear` (column, tp_dim 0: qkv, mlp.fc, mlp.gate, lm_head, Medusa and
  EAGLE fc linears, split with biases) and `RowLinear` (tp_dim 1: attention.dense, mlp.proj); norms whole.
  `Linear.postprocess` for qkv: q, k, v each chunked over tp and concatenated per rank; when
  num_kv_heads < tp each KV head is first repeated tp / num_kv_heads times in place (`[h0 h0 h1 h1 …]`,
  as `models/convert_utils.py` `dup_kv_weight`).
* `models/llama/model.py`: vocab_embedding on the first pp rank (whole, or split on rows with
  `use_parallel_embedding`), ln_f and lm_head (rows padded to `pad_vocab_size`) on the last.
* A draft's tensors (Medusa heads: `medusa.py`; EAGLE nets: `eagle.py`) follow the target's on each rank,
  made of the same parts (`layer_parts`, `embedding_part`, `lm_head_parts`).
* FP8 (`tensorrt_llm/quantization/layers.py` `FP8Linear`/`FP8RowLinear`, `quantization/quantize.py`):
  `<linear>.weight` float8_e4m3fn, `<linear>.weights_scaling_factor` and `.activation_scaling_factor`
  float32 [1]; `attention.kv_cache_scaling_factor` and `attention.kv_cache_rcp_scaling_factor` float32 [1]
  on every attention (`kv_cache_quantize`), = max(k_scale, v_scale) and its reciprocal (`layers/
  attention.py` `Attention.postprocess`; 1.0 where the checkpoint has no scale, as for the EAGLE drafter).
  See `fp8.py` for the fused qkv.

A `Part` says how to make a tensor (`op`) from source keys (`src`, namespaced "base:" for the target, a draft's
`Draft.source` for its own); `writer.py` executes it. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from builder.model.config import LlamaConfig
from builder.trtllm.checkpoint.mapping import Mapping, pad_vocab_size

F32, FP8 = "F32", "F8_E4M3"


@dataclass(frozen=True)
class Part:
    """One tensor of a rank file."""

    name: str  # TensorRT-LLM name
    shape: tuple[int, ...]  # per-rank shape
    dtype: str  # safetensors dtype
    op: str  # copy | rows | cols | vocab_rows | qkv | qkv_fp8 | zeros | scale | max_scale | rcp_max_scale | ones
    src: tuple[str, ...] = ()  # source keys


@dataclass(frozen=True)
class Quant:
    """What the FP8 checkpoint quantized: FP8 linears by HF module name, and the KV cache scales."""

    fp8_modules: frozenset[str] = frozenset()  # e.g. "model.layers.0.self_attn.q_proj", "lm_head"
    kv_cache: bool = False  # FP8 KV cache: every attention gets kv_cache(_rcp)_scaling_factor
    kv_keys: dict[int, tuple[str, str]] = field(default_factory=dict)  # layer -> (k_scale key, v_scale key)


@dataclass(frozen=True)
class Heads:
    """Head and width facts of one Llama stack under tp (the draft's or the target's)."""

    C: int
    D: int
    H: int
    KV: int
    I: int  # noqa: E741 (intermediate size)

    @classmethod
    def of(cls, cfg: LlamaConfig) -> Heads:
        return cls(
            cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
        )

    def qkv_rows(self, tp: int) -> int:  # rows of one rank's fused qkv
        return (self.H // tp + 2 * max(self.KV // tp, 1)) * self.D


def layer_parts(
    h: Heads, m: Mapping, dtype: str, src: str, tllm: str, quant: Quant, layer: int | None, input_norm: bool = True
) -> list[Part]:
    """One decoder layer: `src` is the HF prefix (e.g. "base:model.layers.7."), `tllm` the TRT-LLM one.

    `layer` is the global HF layer whose FP8 linears / KV scales apply (None for a draft layer: never FP8,
    KV scales 1.0)."""
    tp = m.tp
    norm = Part(tllm + "input_layernorm.weight", (h.C,), dtype, "copy", (src + "input_layernorm.weight",))
    out = [norm] if input_norm else []
    qkv_src = tuple(f"{src}self_attn.{p}_proj.weight" for p in "qkv")
    out += _linear(tllm + "attention.qkv", (h.qkv_rows(tp), h.C), dtype, "qkv", qkv_src, quant, layer)
    out += _linear(
        tllm + "attention.dense",
        (h.C, h.H * h.D // tp),
        dtype,
        "cols",
        (src + "self_attn.o_proj.weight",),
        quant,
        layer,
    )
    if quant.kv_cache:
        ks = quant.kv_keys.get(layer) if layer is not None else None
        sf = tllm + "attention.kv_cache_scaling_factor"
        rcp = tllm + "attention.kv_cache_rcp_scaling_factor"
        out += (
            [Part(sf, (1,), F32, "max_scale", ks), Part(rcp, (1,), F32, "rcp_max_scale", ks)]
            if ks
            else [Part(sf, (1,), F32, "ones"), Part(rcp, (1,), F32, "ones")]
        )
    out += _linear(tllm + "mlp.fc", (h.I // tp, h.C), dtype, "rows", (src + "mlp.gate_proj.weight",), quant, layer)
    out += _linear(tllm + "mlp.gate", (h.I // tp, h.C), dtype, "rows", (src + "mlp.up_proj.weight",), quant, layer)
    out += _linear(tllm + "mlp.proj", (h.C, h.I // tp), dtype, "cols", (src + "mlp.down_proj.weight",), quant, layer)
    post = (src + "post_attention_layernorm.weight",)
    out.append(Part(tllm + "post_layernorm.weight", (h.C,), dtype, "copy", post))
    return out


def _linear(
    name: str, shape: tuple[int, int], dtype: str, op: str, srcs: tuple[str, ...], quant: Quant, layer: int | None
) -> list[Part]:
    modules = [s.split(":", 1)[1].removesuffix(".weight") for s in srcs]
    fp8 = [mod in quant.fp8_modules for mod in modules]
    if not any(fp8) or layer is None:
        return [Part(name + ".weight", shape, dtype, op, srcs)]
    if not all(fp8):
        raise ValueError(f"{name}: q, k and v must all be FP8 or none of them")
    w_scales = tuple(s.removesuffix(".weight") + ".weight_scale" for s in srcs)
    a_scales = tuple(s.removesuffix(".weight") + ".input_scale" for s in srcs)
    if op == "qkv":  # one scale for the fused weight: q, k, v share it (requantized only if not: fp8.py)
        return [
            Part(name + ".weight", shape, FP8, "qkv_fp8", srcs + w_scales),
            Part(name + ".weights_scaling_factor", (1,), F32, "max_scale", w_scales),
            Part(name + ".activation_scaling_factor", (1,), F32, "max_scale", a_scales),
        ]
    return [
        Part(name + ".weight", shape, FP8, op, srcs),
        Part(name + ".weights_scaling_factor", (1,), F32, "scale", w_scales),
        Part(name + ".activation_scaling_factor", (1,), F32, "scale", a_scales),
    ]


def embedding_part(name: str, src: str, V: int, C: int, m: Mapping, dtype: str, parallel: bool) -> Part:
    if not parallel or m.tp == 1:
        return Part(name, (V, C), dtype, "copy", (src,))
    return Part(name, (pad_vocab_size(V, m.tp) // m.tp, C), dtype, "vocab_rows", (src,))


def base_parts(cfg: LlamaConfig, m: Mapping, dtype: str, quant: Quant, parallel_embedding: bool) -> list[Part]:
    """The target model's tensors on rank `m`."""
    h, V = Heads.of(cfg), cfg.vocab_size
    out: list[Part] = []
    if m.is_first_pp_rank:
        out.append(
            embedding_part(
                "transformer.vocab_embedding.weight",
                "base:model.embed_tokens.weight",
                V,
                h.C,
                m,
                dtype,
                parallel_embedding,
            )
        )
    for local, layer in enumerate(m.pp_layers(cfg.num_hidden_layers)):
        out += layer_parts(h, m, dtype, f"base:model.layers.{layer}.", f"transformer.layers.{local}.", quant, layer)
    if m.is_last_pp_rank:
        out.append(Part("transformer.ln_f.weight", (h.C,), dtype, "copy", ("base:model.norm.weight",)))
        head = "base:model.embed_tokens.weight" if cfg.tie_word_embeddings else "base:lm_head.weight"
        out += lm_head_parts("lm_head", head, V, h.C, m, dtype, "lm_head" in quant.fp8_modules)
    return out


def lm_head_parts(name: str, src: str, V: int, C: int, m: Mapping, dtype: str, fp8: bool) -> list[Part]:
    shape = (pad_vocab_size(V, m.tp) // m.tp, C)
    if not fp8:
        return [Part(name + ".weight", shape, dtype, "vocab_rows", (src,))]
    base = src.removesuffix(".weight")
    return [
        Part(name + ".weight", shape, FP8, "vocab_rows", (src,)),
        Part(name + ".weights_scaling_factor", (1,), F32, "scale", (base + ".weight_scale",)),
        Part(name + ".activation_scaling_factor", (1,), F32, "scale", (base + ".input_scale",)),
    ]
