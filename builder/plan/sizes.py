"""What the memory plans count in: the plan and its weight components, bytes per dtype, the device's memory, how
TensorRT-LLM splits a decoder layer over tensor-parallel ranks, and what the own-engine plan assumes of the engines
(`Layout`). The plans: `builder.plan.memory` (TensorRT-LLM's paged KV), `builder.plan.own_engines` (trtspec's own
engines); a method's share of both: `builder.plan.drafts`.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field

from builder.recipe.gpus import GPUS
from builder.recipe.schema import Architecture, Recipe

DTYPE_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4}
GIB = 2**30
# the own engines' step graphs: "greedy", "rejection" (speculative.verification: rejection) and the draft graph of a
# DRAFT_GRAPH method (the EAGLE graph contract, `builder.export.contract.GRAPHS`; its folder
# `builder.stages.export.DRAFT_GRAPH_FOLDER`), named as its scratch and I/O slots are reported
GREEDY, REJECTION, DRAFT_ENGINE = "greedy", "rejection", "eagle"


@dataclass
class Component:
    name: str  # decoder, embed_tokens, lm_head, medusa_heads, eagle_draft, norms
    params: int  # per rank
    dtype: str
    bytes: int


@dataclass
class MemoryPlan:
    device: str
    device_bytes: int
    tp: int
    pp: int
    components: list[Component] = field(default_factory=list)
    weight_bytes: int = 0
    weight_bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    runtime_reserve_bytes: int = 0
    activation_bytes: int = 0
    kv_bytes_per_token: int = 0
    free_bytes: int = 0
    kv_cache_fraction: float = 0.9
    kv_budget_bytes: int = 0
    tokens_per_block: int = 32
    kv_dtype: str = "bf16"
    kv_blocks: int = 0
    kv_tokens: int = 0
    tokens_per_sequence: int = 0
    concurrent_sequences: int = 0
    headroom_bytes: int = 0
    fits: bool = True
    problems: list[str] = field(default_factory=list)
    layout: str = ""  # what the plan assumed of the engines (own engines: dtypes, KV layout, scratch)
    scratch_bytes: dict[str, int] = field(default_factory=dict)  # own engines: "engine/profile" -> estimate
    io_slot_bytes: dict[str, int] = field(default_factory=dict)  # tensorrt: device I/O slots per engine
    pinned_host_bytes: int = 0  # tensorrt: the I/O slots' pinned host staging (host RAM, not the GPU)
    draft_kv_bytes_per_token: int = 0  # own engines: the draft graph's KV per token (model.dtype)

    def to_json(self) -> dict:
        return asdict(self)


def layer_linear_params(a: Architecture) -> int:
    """Weights of one decoder layer's linears, unsplit: q, o, k, v and the MLP's gate, up and down."""
    hd = a.dim_per_head
    attn = a.hidden_size * hd * (a.num_attention_heads * 2 + a.num_kv_heads * 2)  # q, o + k, v
    return attn + 3 * a.hidden_size * a.intermediate_size


def pad_vocab(v: int, tp: int) -> int:
    """TensorRT-LLM's `pad_vocab_size`: the vocabulary rounded up to a multiple of tp."""
    return math.ceil(v / tp) * tp


def rank_layer(a: Architecture, tp: int) -> tuple[int, int]:
    """(linear weights, norm weights) of one decoder layer on one rank, as TensorRT-LLM splits it."""
    c, d, h, kv, i = a.hidden_size, a.dim_per_head, a.num_attention_heads, a.num_kv_heads, a.intermediate_size
    qkv = (h // tp + 2 * max(kv // tp, 1)) * d * c  # KV heads duplicated to one per rank when kv < tp
    return qkv + c * (h * d // tp) + 3 * (i // tp) * c, 2 * c


def scale_bytes(recipe: Recipe, layers: int, fp8: bool) -> int:
    """TensorRT-LLM's float32 [1] scales: 2 per FP8 linear (5 per layer), 2 per attention with an FP8 KV cache."""
    return layers * (5 * 2 * 4 * fp8 + 2 * 4 * (recipe.quantization.kv_cache == "fp8"))


def weight_dtype(recipe: Recipe, module: str) -> str:
    """fp8 for a quantizable module the recipe quantizes (not in quantization.exclude_modules), else model.dtype."""
    q = recipe.quantization
    if q.mode == "fp8" and module not in q.exclude_modules and module != "norms":
        return "fp8"
    return recipe.model.dtype


def device_memory(recipe: Recipe) -> tuple[str, int]:
    device = recipe.target.device
    if device == "cpu":
        return "host RAM", os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    gpu = GPUS[device]
    return gpu.name, gpu.memory_bytes


@dataclass(frozen=True)
class Layout:
    """What the own-engine plan assumes of the engines (printed as one line)."""

    backend: str
    act: str  # weights / activations not in FP8
    kv: str  # the target's KV cache
    slots: int
    capacity: int  # CAP of the target's caches
    draft_capacity: int  # CAP_e of the draft graph's caches (0: no draft graph)
    engines: tuple[str, ...]  # GREEDY, REJECTION, DRAFT_ENGINE

    def line(self, a: Architecture, tp: int, pp: int) -> str:
        kv, d = math.ceil(a.num_kv_heads / tp), a.dim_per_head
        draft = (
            f"; EAGLE draft [{self.slots}, {kv}, {self.draft_capacity}, {d}] in {self.act}"
            if self.draft_capacity
            else ""
        )
        split = "" if tp * pp == 1 else f"; tp={tp} pp={pp}: per rank as if split (these engines do not split)"
        ctx = (
            "one TensorRT arena shared by every profile's context, + device I/O slots (pinned on the host too)"
            if self.backend == "tensorrt"
            else "one ONNX Runtime arena per session"
        )
        fp8 = f"FP8 linears 1 byte + {self.act} scales" if self.backend == "tensorrt" else "FP8 folded to float32"
        return (
            f"{self.backend} engines ({', '.join(self.engines)}): weights in {self.act} ({fp8}) · KV per-slot "
            f"contiguous, not paged: per layer [{self.slots} slots, {kv}, CAP {self.capacity}, {d}] in {self.kv}{draft}"
            f" · scratch estimated per optimization profile, {ctx}{split}"
        )
