"""Memory plan of trtspec's own engines — target.backend tensorrt (GPUs) and onnxruntime (cpu) — from the
engines' real dtypes and layout (TensorRT-LLM's paged plan: `builder.plan.memory`).

weights   one copy per engine (TensorRT engines and ONNX Runtime sessions share no weights): the target step
          graph (greedy; a second one for the rejection graph when speculative.verification is rejection,
          Medusa heads fused into both) and the EAGLE draft graph, which holds its own embedding table and
          the target's LM head. tensorrt: the GPU form's types (`builder.export.contract.Precision`) — an FP8
          linear is 1 byte per weight plus its scales in model.dtype (weight scales per output column of the
          packed QKV and gate/up MatMuls, one for o_proj and down_proj, one input scale per MatMul: at their
          largest), everything else in model.dtype, and the RoPE tables (cos, sin [CAP, D/2]) per graph.
          onnxruntime: float32 throughout (the CPU form; FP8 weights are folded to float32 when a session
          opens, `builder.export.qdq.ort_foldable`).
KV        per-slot contiguous, not paged: per layer keys and values [slots, KV, CAP, D]
          (`builder.engines.ort.kv`, the TensorRT runtime's DeviceKV), slots = build.max_batch_size, allocated
          up front (kv_cache_free_gpu_mem_fraction, a TensorRT-LLM setting, plays no part). CAP = max_seq_len
          + the largest step tree (the recipe's drafter or the default Lookahead W = N = G = 4, as
          `builder.stages.export.capacity`). The target's in the contract's kv dtype (float8e4m3fn when
          quantization.kv_cache is fp8 on a GPU, else model.dtype; float32 on the CPU); the EAGLE draft's
          [slots, KV, CAP_e, D], CAP_e = max_seq_len + tentative draft slots + 1, in model.dtype.
scratch   activation memory per optimization profile (step: T = CAP − max_seq_len nodes; prefill: T =
          max_input_len) at its largest shapes, rows N = slots × T: the residual stream and its norm [N, C],
          the larger of the attention ([N, (H + 2KV)·D + H·D]), MLP ([N, 3I]) and EAGLE fc ([N, 3C]) working
          sets, the additive mask [slots, 1, T, CAP] (the TensorRT form attends every slot), the logits
          [slots, Tv, V] in model.dtype plus their float32 copy (the EAGLE draft's log-softmax another), the
          Medusa heads' [slots, Hm, C + V]. tensorrt: ONE device-memory arena shared by every profile's
          execution context of every engine of the folder (`builder.engines.tensorrt.device.Lane`): the largest
          profile's scratch; plus per engine the runtime's device I/O slots — every non-cache tensor of the
          contract at its largest shape over the profiles (T* = max(max_input_len, step nodes), rounded up
          to 256 bytes; `runtime.IoSlots`), which are held once more in pinned host memory. onnxruntime: one
          arena per session, its larger profile. An estimate: TensorRT's own figure per profile
          (device_memory_max_bytes) is in the engine manifest.
method    what the recipe's method adds is its share (`builder.plan.drafts`, named by its `Method.memory`): Medusa
          heads fused into the target graphs (`builder.plan.medusa`), the EAGLE draft graph (`builder.plan.eagle`);
          nothing for a method without draft weights.
fits      weights + KV + scratch + runtime reserve ≤ the device's memory (host RAM on the CPU).
tp / pp   trtspec's engines run on one device; with tp or pp > 1 the figures are per rank as if the layers
          and heads were split (as TensorRT-LLM would), which these engines do not do (the layout line says so).
"""

from __future__ import annotations

import math

from builder.export.contract import DTYPE_BYTES, FP8
from builder.plan.drafts import DraftMemory, draft_memory
from builder.plan.sizes import (
    DRAFT_ENGINE,
    GIB,
    GREEDY,
    REJECTION,
    Component,
    Layout,
    MemoryPlan,
    device_memory,
    layer_linear_params,
    weight_dtype,
)
from builder.recipe.schema import Architecture, Recipe
from builder.speculative import registry

NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": FP8}
SHORT = {v: k for k, v in NAMES.items()}
STEP, PREFILL = "step", "prefill"  # the optimization profiles of every engine


def layout(recipe: Recipe, draft_len: int) -> Layout:
    b, backend = recipe.build, recipe.target.engine_backend
    gpu = backend == "tensorrt"
    act = NAMES[recipe.model.dtype] if gpu else "float32"
    kv = FP8 if gpu and recipe.quantization.kv_cache == "fp8" else act
    cap = b.max_seq_len + max(draft_len + 1, registry.default_room())
    engines = [GREEDY] + ([REJECTION] if recipe.speculative.verification == "rejection" else [])
    room = draft_memory(recipe.speculative).draft_graph_room(recipe, draft_len)
    draft_cap = b.max_seq_len + room if room else 0
    if room:
        engines.append(DRAFT_ENGINE)
    return Layout(backend, act, kv, b.max_batch_size, cap, draft_cap, tuple(engines))


def _fp8_scales(a: Architecture) -> int:
    """Scale values of one FP8 decoder layer as the graph stores them, at most (module docstring)."""
    return (a.num_attention_heads + 2 * a.num_kv_heads) * a.dim_per_head + 2 * a.intermediate_size + 2 + 4


def act_component(name: str, params: int, lay: Layout) -> Component:
    """`params` weights in the engines' activation dtype (not quantized)."""
    return Component(name, params, SHORT[lay.act], params * DTYPE_BYTES[lay.act])


def target_components(recipe: Recipe, a: Architecture, lay: Layout, share: DraftMemory) -> list[Component]:
    """The weights of one target step engine (per rank), the method's fused weights included."""
    tp, pp, act = recipe.parallelism.tp, recipe.parallelism.pp, lay.act
    layers, c, v = math.ceil(a.num_layers / pp), a.hidden_size, a.vocab_size

    def part(name: str, params: int, quantizable: bool = True, scales: int = 0) -> Component:
        fp8 = quantizable and lay.backend == "tensorrt" and weight_dtype(recipe, name) == "fp8"
        dtype = FP8 if fp8 else act
        nbytes = params * DTYPE_BYTES[dtype] + (scales * DTYPE_BYTES[act] if fp8 else 0)
        return Component(name, params, SHORT[dtype], nbytes)

    out = [
        part("decoder", layers * layer_linear_params(a) // tp, scales=layers * _fp8_scales(a)),
        part("norms", (2 * layers + 1) * c, quantizable=False),
        part("embed_tokens", v * c // tp, quantizable=False),
    ]
    if not a.tie_word_embeddings:
        out.append(part("lm_head", v * c // tp, scales=2))
    out.append(part("rope tables", lay.capacity * a.dim_per_head, quantizable=False))
    return out + share.fused_weights(recipe, a, lay)


def kv_per_token(a: Architecture, dtype: str, layers: int, tp: int) -> int:
    """Bytes of keys and values of one token: 2 × layers × KV heads × head_dim × bytes(dtype)."""
    return 2 * layers * math.ceil(a.num_kv_heads / tp) * a.dim_per_head * DTYPE_BYTES[dtype]


def scratch(recipe: Recipe, a: Architecture, lay: Layout, share: DraftMemory) -> dict[str, int]:
    """Scratch bytes per "engine/profile" (module docstring)."""
    tp, b, s, act = recipe.parallelism.tp, recipe.build, lay.slots, DTYPE_BYTES[lay.act]
    c, i, d, v = a.hidden_size, math.ceil(a.intermediate_size / tp), a.dim_per_head, math.ceil(a.vocab_size / tp)
    h, kv = math.ceil(a.num_attention_heads / tp), math.ceil(a.num_kv_heads / tp)
    per_row = act * (2 * c + max((h + 2 * kv) * d + h * d, 3 * i, 3 * c))
    fused = share.fused_scratch(recipe, a, lay)
    steps = {STEP: lay.capacity - b.max_seq_len, PREFILL: b.max_input_len}
    out = {}
    for engine in lay.engines:
        for profile, t in steps.items():
            if engine == DRAFT_ENGINE:
                out[f"{engine}/{profile}"] = share.draft_graph_scratch(recipe, a, lay, profile, t, per_row)
            else:
                tv = t if profile == STEP else 1
                out[f"{engine}/{profile}"] = s * t * (per_row + lay.capacity * act) + s * tv * v * (act + 4) + fused
    return out


def io_slots(recipe: Recipe, a: Architecture, lay: Layout, share: DraftMemory) -> dict[str, int]:
    """tensorrt: bytes of each engine's I/O slots (module docstring), from the I/O contract."""
    from builder.export.contract import EAGLE, TARGET, Precision, nbytes

    b = recipe.build
    n = lay.capacity - b.max_seq_len  # step nodes
    top_k, heads = share.io_top_k(recipe), share.fused_heads(recipe)
    rows = max(b.max_input_len, lay.draft_capacity - b.max_seq_len)
    target = {
        "B": lay.slots,
        "T": max(b.max_input_len, n),
        "Tv": n,
        "P": n,
        "W": n,
        "C": a.hidden_size,
        "Hm": heads,
        "K": top_k,
    }
    draft = {"B": lay.slots, "F": rows, "U": rows, "C": a.hidden_size, "K": top_k}
    precision = Precision(lay.act, lay.kv)
    out = {}
    for engine in lay.engines:
        contract, sizes = (EAGLE, draft) if engine == DRAFT_ENGINE else (TARGET, target)
        total = 0
        for io in ("inputs", "outputs"):
            for t in contract.specs(io, layers=0, rejection=engine == REJECTION, medusa=heads > 0):
                total += -(-nbytes(precision.resolve(t.dtype), [sizes[d] for d in t.dims]) // 256) * 256
        out[engine] = total
    return out


def plan_own_engines(recipe: Recipe, a: Architecture, draft_len: int) -> MemoryPlan:
    """The memory plan of a tensorrt or onnxruntime recipe (module docstring)."""
    name, total = device_memory(recipe)
    tp, pp, t = recipe.parallelism.tp, recipe.parallelism.pp, recipe.target
    share = draft_memory(recipe.speculative)
    lay = layout(recipe, draft_len)
    plan = MemoryPlan(device=name, device_bytes=total, tp=tp, pp=pp, kv_cache_fraction=1.0, tokens_per_block=0)
    target = target_components(recipe, a, lay, share)
    plan.components = list(target)
    if REJECTION in lay.engines:
        plan.components += [Component(f"{c.name} (rejection engine)", c.params, c.dtype, c.bytes) for c in target]
    if DRAFT_ENGINE in lay.engines:
        plan.components += share.draft_graph_weights(recipe, a, lay)
    plan.weight_bytes = sum(c.bytes for c in plan.components)
    for c in plan.components:
        plan.weight_bytes_by_dtype[c.dtype] = plan.weight_bytes_by_dtype.get(c.dtype, 0) + c.bytes
    plan.scratch_bytes = scratch(recipe, a, lay, share)
    if lay.backend == "tensorrt":  # one arena shared by every context, + each engine's I/O slots
        plan.io_slot_bytes = io_slots(recipe, a, lay, share)
        plan.pinned_host_bytes = sum(plan.io_slot_bytes.values())
        plan.activation_bytes = max(plan.scratch_bytes.values()) + plan.pinned_host_bytes
    else:  # one arena per session: its larger profile
        plan.activation_bytes = sum(
            max(v for k, v in plan.scratch_bytes.items() if k.startswith(f"{e}/")) for e in lay.engines
        )
    plan.runtime_reserve_bytes = int(t.runtime_reserve_gib * GIB)
    plan.kv_dtype = SHORT[lay.kv]
    plan.kv_bytes_per_token = kv_per_token(a, lay.kv, math.ceil(a.num_layers / pp), tp)
    plan.draft_kv_bytes_per_token = share.draft_kv_per_token(recipe, a, lay) if lay.draft_capacity else 0
    plan.kv_budget_bytes = lay.slots * (
        lay.capacity * plan.kv_bytes_per_token + lay.draft_capacity * plan.draft_kv_bytes_per_token
    )
    plan.kv_tokens, plan.tokens_per_sequence, plan.concurrent_sequences = (
        lay.slots * lay.capacity,
        lay.capacity,
        lay.slots,
    )
    plan.free_bytes = total - plan.weight_bytes - plan.runtime_reserve_bytes - plan.activation_bytes
    plan.headroom_bytes = plan.free_bytes - plan.kv_budget_bytes
    plan.layout = lay.line(a, tp, pp)
    if plan.headroom_bytes < 0:
        plan.fits = False
        plan.problems.append(
            f"weights {plan.weight_bytes / GIB:.2f} GiB + KV for {lay.slots} slots of {lay.capacity} tokens "
            f"{plan.kv_budget_bytes / GIB:.2f} GiB + scratch {plan.activation_bytes / GIB:.2f} GiB + reserve "
            f"{plan.runtime_reserve_bytes / GIB:.2f} GiB do not fit in {total / GIB:.2f} GiB ({name}); lower "
            "build.max_batch_size or max_seq_len, quantize the weights to fp8 (quantization.mode), or use "
            "target.backend: trtllm (paged KV, FP8 KV cache)"
        )  # own engines keep the KV cache in model.dtype (checks.py)
    return plan
