"""Llama 3 in plain torch: the reference (oracle) every other engine is compared against.

Readable over fast: manual attention with an explicit boolean mask, RoPE from explicit position ids.
Module and parameter names follow HF `LlamaForCausalLM` minus the `model.` prefix, so a checkpoint
loads by renaming keys only (see `builder.model.loader`).

Shapes: B batch, T new tokens, S = cache length attended (committed + new), C hidden, H query heads,
KV key/value heads, D head_dim, V vocab.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from builder.model.config import LlamaConfig
from builder.model.kv_cache import KVCache


def rope_inv_freq(cfg: LlamaConfig) -> torch.Tensor:  # -> [D/2] fp32
    """Inverse RoPE frequencies, with Llama 3.1's frequency-dependent scaling when configured.

    Llama 3 scaling leaves high frequencies (wavelength < orig_ctx / high_freq_factor) alone, divides
    low frequencies (wavelength > orig_ctx / low_freq_factor) by `factor`, and blends linearly (in
    orig_ctx / wavelength) between the two in the band in between.
    """
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device="cpu").float() / d))
    s = cfg.rope_scaling
    if s is None:
        return inv_freq
    orig_ctx = s.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = orig_ctx / s.low_freq_factor
    high_freq_wavelen = orig_ctx / s.high_freq_factor
    smooth = (orig_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    in_band = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(in_band, blended, scaled)


def rope_cos_sin(
    inv_freq: torch.Tensor,  # [D/2] fp32 (float64 for a float64 model)
    position_ids: torch.Tensor,  # [B, T] int64
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:  # -> cos, sin: [B, T, D] in `dtype`
    """cos/sin tables for the given positions, computed in inv_freq's dtype then cast."""
    freqs = position_ids.to(inv_freq.dtype)[..., None] * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, D): HF layout, halves not interleaved
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(
    x: torch.Tensor,  # [B, heads, T, D]
    cos: torch.Tensor,  # [B, T, D]
    sin: torch.Tensor,  # [B, T, D]
) -> torch.Tensor:  # -> [B, heads, T, D]
    """Rotate each (x[i], x[i + D/2]) pair by its position's angle (the HF "rotate half" layout)."""
    cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, D)
    x1, x2 = x.chunk(2, dim=-1)  # (B, heads, T, D/2) each
    rotated = torch.cat((-x2, x1), dim=-1)  # (B, heads, T, D)
    return x * cos + rotated * sin


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """x in fp32, or in its own dtype when wider (HF's fp32 upcast, without rounding float64 down)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class RMSNorm(nn.Module):
    """x / rms(x) * weight, normalised in fp32 (or wider) and cast back before the weight (as HF does)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., C] -> [..., C]
        x32 = _at_least_fp32(x)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Attention(nn.Module):
    """Grouped-query attention over a KV cache, with an explicit boolean mask."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_head * self.head_dim, cfg.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,  # [B, T, C]
        cos_sin: tuple[torch.Tensor, torch.Tensor],  # [B, T, D] each
        mask: torch.Tensor,  # [B, T, S] bool; True = may attend
        kv: tuple[torch.Tensor, torch.Tensor] | None,  # this layer's cache, [B, KV, CAP, D] each
        start: int,  # cache slot of the first new token; S = start + T
    ) -> torch.Tensor:  # -> [B, T, C]
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)  # (B, KV, T, D)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)  # (B, KV, T, D)
        q, k = apply_rope(q, *cos_sin), apply_rope(k, *cos_sin)
        if kv is not None:
            k_cache, v_cache = kv
            k_cache[:, :, start : start + T] = k
            v_cache[:, :, start : start + T] = v
            k, v = k_cache[:, :, : start + T], v_cache[:, :, : start + T]  # (B, KV, S, D)
        groups = self.n_head // self.n_kv
        k = k.repeat_interleave(groups, dim=1)  # (B, H, S, D): query head h reads KV head h // groups
        v = v.repeat_interleave(groups, dim=1)  # (B, H, S, D)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, S)
        scores = scores.masked_fill(~mask[:, None], float("-inf"))  # (B, H, T, S)
        probs = F.softmax(_at_least_fp32(scores), dim=-1).to(q.dtype)  # (B, H, T, S)
        out = probs @ v  # (B, H, T, D)
        out = out.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)  # (B, T, H*D)
        return self.o_proj(out)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, C] -> [B, T, C]
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm decoder layer: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm: nn.Module = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,  # [B, T, C]
        cos_sin: tuple[torch.Tensor, torch.Tensor],  # [B, T, D] each
        mask: torch.Tensor,  # [B, T, S] bool
        kv: tuple[torch.Tensor, torch.Tensor] | None,  # [B, KV, CAP, D] each
        start: int,
    ) -> torch.Tensor:  # -> [B, T, C]
        x = x + self.self_attn(self.input_layernorm(x), cos_sin, mask, kv, start)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """Llama 3 decoder: embeddings, `num_hidden_layers` blocks, final norm, LM head."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        # A plain attribute, not a buffer: `.to(dtype)` must not round the frequencies.
        self.inv_freq = rope_inv_freq(cfg)  # [D/2] fp32, always on the CPU

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def forward(
        self,
        tokens: torch.Tensor,  # [B, T] int64
        position_ids: torch.Tensor,  # [B, T] int64
        mask: torch.Tensor,  # [B, T, S] bool over (cache[:start] + new); S = start + T
        cache: KVCache | None = None,  # None: no cache, S = T and start must be 0
        start: int = 0,  # cache slot where the T new tokens' KV is written
        features: tuple[int, ...] = (),  # EAGLE-3: return these layers' outputs as `hidden` instead
    ) -> tuple[torch.Tensor, torch.Tensor]:  # -> logits [B, T, V] (model dtype), hidden [B, T, C] ([B, T, n·C])
        """One pass over T new tokens; writes their KV to cache slots [start, start + T).

        Returns the logits and the hidden state after the final norm (the Medusa/EAGLE input) or, with `features`
        (0-based output-of-layer ids), the residual stream after each of those layers, concatenated in that order
        (EAGLE-3's input, `builder.speculative.eagle3.draft_model`).
        """
        B, T = tokens.shape
        S = start + T
        if mask.shape != (B, T, S) or mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool {(B, T, S)}, got {mask.dtype} {tuple(mask.shape)}")
        if cache is None and start != 0:
            raise ValueError("start must be 0 without a cache")
        inv_freq = self.inv_freq.to(
            torch.promote_types(self.dtype, torch.float32)
        )  # fp32 values, float64 math for float64
        cos_sin = rope_cos_sin(inv_freq.to(tokens.device), position_ids, self.dtype)
        x = self.embed_tokens(tokens)  # (B, T, C)
        captured: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.layers):
            x = layer(x, cos_sin, mask, None if cache is None else cache.layer(i), start)
            if i in features:
                captured[i] = x
        hidden = self.norm(x)  # (B, T, C)
        logits = self.lm_head(hidden)
        if features:
            hidden = torch.cat([captured[i] for i in features], dim=-1)  # (B, T, n·C)
        return logits, hidden


def causal_mask(T: int, past: int = 0, batch: int = 1) -> torch.Tensor:  # -> [B, T, past + T] bool
    """Every new token attends to all `past` cached tokens and to the new tokens up to itself."""
    new = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    full = torch.cat((torch.ones(T, past, dtype=torch.bool), new), dim=1)  # (T, past + T)
    return full.expand(batch, T, past + T)
