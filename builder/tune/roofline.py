"""A predicted `StepCurve` for a GPU target: the roofline of the recipe's GPU (`builder.recipe.gpus`).

One call of a graph over `tokens` new tokens (b sequences × T nodes) with `ctx` cached tokens per sequence:

    bytes  = Σ weights read once (each linear in its dtype) + b · ctx · KV bytes per token
    flops  = Σ_linears 2 · tokens · params / rate(dtype)
             + 4 · tokens · (ctx + T) · layers · heads · head_dim / rate(act)     (attention: QKᵀ and PV)
    time   = max(bytes / bandwidth, flop time)

per tensor-parallel rank (weights, heads and KV heads split by tp); pipeline stages run one after another
for one batch, so pp does not shorten a step. Linears run at the FP8 rate when the recipe quantizes them
(quantization.mode fp8, not in exclude_modules), else at the model.dtype rate; the KV cache is read in
its dtype. The target step covers the decoder linears, the LM head over every node and, for a method whose heads
are fused into it (`Method.exports` FUSED_HEADS: Medusa), the heads on one hidden state per sequence. A method with a
draft graph (DRAFT_GRAPH: EAGLE) gets its draft calls' tables too: a call reads the draft layer (fc + one decoder
layer, model.dtype) and the target's LM head (its dtype), plus its own KV cache. A draft's linears take the FP8 rate
unless its module (`DraftCheckpoint.module`) is in quantization.exclude_modules.

It is a prediction, not a measurement: peak datasheet rates, no kernel-launch, scheduling or communication
time, so it is a lower bound whose shape (flat while memory-bound, then linear in tokens) is what the
tuner uses. `ctx` defaults to the recipe's bench.input_len + bench.output_len / 2 (the average context
of a bench request).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from builder.engines.step_curve import batch_grid, size_grid
from builder.recipe.gpus import GPUS, Gpu
from builder.recipe.schema import Architecture, Recipe
from builder.speculative import registry
from builder.speculative.method import DRAFT_GRAPH, FUSED_HEADS, Method
from builder.tune.curve import StepCurve, Table

BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Linear:
    name: str
    params: int  # per rank
    dtype: str  # fp8 | bf16 | fp16 | fp32
    per_token: bool = True  # False: runs once per sequence (Medusa heads on the last accepted node)


@dataclass(frozen=True)
class Graph:
    """What one call of a graph reads and multiplies (per rank)."""

    linears: tuple[Linear, ...]
    kv_bytes_per_token: int  # KV this graph reads per cached token
    attention: tuple[int, int, int]  # (layers, query heads per rank, head_dim)
    act: str  # dtype of the attention math


def _dtype(recipe: Recipe, module: str) -> str:
    q = recipe.quantization
    return "fp8" if q.mode == "fp8" and module not in q.exclude_modules else recipe.model.dtype


def _layer_params(a: Architecture) -> int:
    hd = a.dim_per_head
    attention = a.hidden_size * hd * (2 * a.num_attention_heads + 2 * a.num_kv_heads)  # q, o + k, v
    return attention + 3 * a.hidden_size * a.intermediate_size  # + gate, up, down


def target_graph(recipe: Recipe, a: Architecture) -> Graph:
    tp, h, v = recipe.parallelism.tp, a.hidden_size, a.vocab_size
    kv_dtype = "fp8" if recipe.quantization.kv_cache == "fp8" else recipe.model.dtype
    kv_heads = math.ceil(a.num_kv_heads / tp)
    linears = [
        Linear("decoder", a.num_layers * _layer_params(a) // tp, _dtype(recipe, "decoder")),
        Linear("lm_head", v * h // tp, _dtype(recipe, "lm_head")),
    ]
    spec, m = recipe.speculative, registry.of(recipe.speculative)
    if m.exports == FUSED_HEADS:  # Medusa's heads: num_layers residual blocks (h·h + h) and an LM head (h·v) each
        per_head = spec.num_layers * (h * h + h) + h * v
        module = _draft_module(m)
        linears.append(Linear(module, spec.num_heads * per_head // tp, _dtype(recipe, module), False))
    kv = 2 * a.num_layers * kv_heads * a.dim_per_head * BYTES[kv_dtype]
    return Graph(tuple(linears), kv, (a.num_layers, a.num_attention_heads // tp, a.dim_per_head), recipe.model.dtype)


def _draft_module(m: Method) -> str:
    """The draft's pattern in quantization.exclude_modules (its dtype follows it)."""
    assert m.draft is not None, f"{m.name} exports draft weights but has no draft checkpoint"
    return m.draft.module


def eagle_graph(recipe: Recipe, a: Architecture) -> Graph:
    """One EAGLE draft call: fc (2h -> h, bias) + one decoder layer, then the target's LM head."""
    tp, h, v = recipe.parallelism.tp, a.hidden_size, a.vocab_size
    layer = (2 * h * h + h + _layer_params(a)) // tp
    module = _draft_module(registry.of(recipe.speculative))
    linears = (
        Linear(module, layer, _dtype(recipe, module)),
        Linear("lm_head", v * h // tp, _dtype(recipe, "lm_head")),
    )
    kv = 2 * math.ceil(a.num_kv_heads / tp) * a.dim_per_head * BYTES[recipe.model.dtype]
    return Graph(linears, kv, (1, a.num_attention_heads // tp, a.dim_per_head), recipe.model.dtype)


def call_seconds(g: Graph, gpu: Gpu, batch: int, nodes: int, ctx: int) -> float:
    """Roofline time of one call over `nodes` new tokens per sequence (module docstring)."""
    tokens = batch * nodes
    weights = sum(lin.params * BYTES[lin.dtype] for lin in g.linears)
    nbytes = weights + batch * ctx * g.kv_bytes_per_token
    layers, heads, hd = g.attention
    compute = sum(2 * (tokens if lin.per_token else batch) * lin.params / gpu.flops(lin.dtype) for lin in g.linears)
    compute += 4 * tokens * (ctx + nodes) * layers * heads * hd / gpu.flops(g.act)
    return max(nbytes / gpu.bandwidth, compute)


def roofline_curve(recipe: Recipe, a: Architecture, max_nodes: int, ctx: int | None = None) -> StepCurve:
    """The predicted curve for T = 1..max_nodes and the batch sizes up to build.max_batch_size."""
    device = recipe.target.device
    if device not in GPUS:
        raise ValueError(f"no roofline for target {device!r}: the CPU's curve is measured by the engine stage")
    gpu = GPUS[device]
    ctx = ctx if ctx is not None else recipe.bench.input_len + recipe.bench.output_len // 2
    batches, sizes = batch_grid(recipe.build.max_batch_size), size_grid(max_nodes)
    tg = target_graph(recipe, a)
    target: Table = {b: {t: 1e3 * call_seconds(tg, gpu, b, t, ctx) for t in sizes} for b in batches}
    expand: Table = {}
    extend: Table = {}
    if registry.of(recipe.speculative).exports == DRAFT_GRAPH:
        eg = eagle_graph(recipe, a)
        widths = size_grid(max(max_nodes - 1, 1))
        expand = {b: {f: 1e3 * call_seconds(eg, gpu, b, f, ctx) for f in widths} for b in batches}
        extend = {b: {m: 1e3 * call_seconds(eg, gpu, b, m, ctx) for m in (1, 2, 4, 8, 16)} for b in batches}
    about = {
        "gpu": gpu.name,
        "bandwidth_GBps": gpu.bandwidth_gbps,
        "bf16_TFLOPs": gpu.bf16_tflops,
        "fp8_TFLOPs": gpu.fp8_tflops,
        "context": ctx,
        "tp": recipe.parallelism.tp,
        "note": "prediction: peak datasheet rates, no launch/communication time (a lower bound)",
    }
    return StepCurve("roofline", target, expand, extend, about)
