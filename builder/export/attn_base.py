"""What every attention variant of the exported graphs shares: the per-graph step values, the cache names of
one layer, the attention shape, and the `Variant` protocol (`builder.export.attention`: the variants).

A variant emits, for one graph, the per-graph attention inputs (`prepare`: mask or bias, live length,
RoPE tables) and, per layer, the norms, the attention block (packed QKV MatMul output to the pre-`o_proj`
output, writing the layer's cache) and the SiLU; `fused_gate_up` says how the MLP's gate and up are laid
out (`builder.export.llama`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from builder.export.contract import Precision
from builder.export.graph import Graph

MS = "com.microsoft"


@dataclass(frozen=True)
class AttnShape:
    heads: int  # H
    kv_heads: int  # KV
    head_dim: int  # D


@dataclass(frozen=True)
class StepValues:
    """Graph values every layer's attention reads (names in the graph)."""

    position_ids: str  # [B, T] int64
    past_len: str  # [B] int64
    write_at: str  # [B] int64
    num_new: str  # [B] int64
    tree_mask: str  # [B, T, U] bool


@dataclass(frozen=True)
class LayerCache:
    past_key: str  # [B, KV, CAP, D] graph input
    past_value: str
    present_key: str  # [B, KV, CAP, D] graph output name to produce
    present_value: str


class Variant(Protocol):
    name: str
    opsets: dict[str, int]
    precision: Precision
    fused_gate_up: bool  # one gate_up MatMul + Split, or separate gate and up MatMuls

    def prepare(self, g: Graph, step: StepValues, cos: np.ndarray, sin: np.ndarray, shape: AttnShape) -> None: ...
    def norm(self, g: Graph, x: str, weight: str, eps: float, out: str | None = None) -> str: ...
    def add_norm(
        self, g: Graph, x: str, delta: str, weight: str, eps: float, out: str | None = None
    ) -> tuple[str, str]: ...
    def attention(
        self,
        g: Graph,
        h: str,
        qkv_weight: str,
        shape: AttnShape,
        cache: LayerCache,
        kv_scales: tuple[float, float] | None = None,
    ) -> str: ...
    def silu(self, g: Graph, x: str) -> str: ...
