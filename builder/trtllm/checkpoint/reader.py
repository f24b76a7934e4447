"""Reassemble a TensorRT-LLM checkpoint (any tp × pp) into the torch reference — the proof of a conversion.

Written from the format (the upstream files: `names.py`; the drafts' `medusa.py`, `eagle.py`), not from the
writer's code paths: the mapping is read back from config.json, each pipeline rank's layers are found by the local
indices present in its files (renumbered from 0, global = the count of layers on earlier pp ranks + local), and
every split is undone by concatenating the tensor-parallel ranks in rank order. On the way it checks
what the format promises: replicated tensors (norms, the whole embedding, FP8 scales) equal on every tp
rank; duplicated KV heads (num_kv_heads < tp) equal within each group of tp / num_kv_heads ranks; the
vocabulary padding rows all zero; the EAGLE nets identical and their LM heads the target's; no tensor
left unread. FP8 weights are dequantized (fp8 · weights_scaling_factor, float32); the scales are returned
by global TensorRT-LLM name (layer indices made global).

Returns `Reassembled`: a float32 `builder.model.llama.Llama`, plus `MedusaHeads` or `EagleDraft` when
present, and config.json.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.model.llama import Llama
from builder.speculative.eagle.draft_model import EagleDraft
from builder.speculative.medusa.heads import MedusaHeads

ARCHITECTURES = ("LlamaForCausalLM", "MedusaForCausalLM", "EagleForCausalLM")
LAYER = re.compile(r"^transformer\.layers\.(\d+)\.")


@dataclass
class Reassembled:
    config: dict[str, Any]  # config.json
    cfg: LlamaConfig
    model: Llama  # float32, eval
    medusa: MedusaHeads | None = None
    eagle: EagleDraft | None = None  # LM head attached (the target's)
    scales: dict[str, torch.Tensor] = field(default_factory=dict)  # FP8 scales by global TRT-LLM name
    fp8_weights: set[str] = field(default_factory=set)  # global TRT-LLM names of FP8 weights


class _Ranks:
    """Every rank file's tensors, with bookkeeping of what was read."""

    def __init__(self, folder: Path, tp: int, pp: int) -> None:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        self.tp, self.pp = tp, pp
        self.t: list[dict[str, torch.Tensor]] = []
        self.used: list[set[str]] = []
        for r in range(tp * pp):
            path = folder / f"rank{r}.safetensors"
            if not path.is_file():
                raise UserError(f"missing rank{r}.safetensors for tp={tp} × pp={pp}", location=str(folder))
            try:
                self.t.append(load_file(str(path)))
            except (SafetensorError, OSError) as exc:
                raise UserError(f"unreadable safetensors file: {exc}", location=str(path)) from exc
            self.used.append(set())

    def ranks(self, pp_rank: int) -> list[int]:
        return [pp_rank * self.tp + t for t in range(self.tp)]

    def has(self, rank: int, name: str) -> bool:
        return name in self.t[rank]

    def raw(self, rank: int, name: str) -> torch.Tensor:
        if name not in self.t[rank]:
            raise UserError(f"rank{rank}.safetensors lacks {name!r}", field=name)
        self.used[rank].add(name)
        return self.t[rank][name]

    def get(self, rank: int, name: str) -> torch.Tensor:  # float32, FP8 dequantized with its weight scale
        t = self.raw(rank, name)
        if t.dtype == torch.float8_e4m3fn:
            s = self.raw(rank, name.removesuffix(".weight") + ".weights_scaling_factor")
            return t.to(torch.float32) * s.reshape(1).float()
        return t.float()

    def same(self, ranks: list[int], name: str) -> torch.Tensor:
        ts = [self.get(r, name) for r in ranks]
        if any(not torch.equal(ts[0], t) for t in ts[1:]):
            raise UserError(f"{name!r} should be replicated but differs between ranks {ranks}", field=name)
        return ts[0]

    def cat(self, ranks: list[int], name: str, dim: int) -> torch.Tensor:
        return torch.cat([self.get(r, name) for r in ranks], dim=dim)

    def unread(self) -> list[str]:
        return [f"rank{r}:{k}" for r, names in enumerate(self.t) for k in names if k not in self.used[r]]


def _unpad(t: torch.Tensor, V: int, name: str) -> torch.Tensor:  # [Vp, C] -> [V, C]
    if t.shape[0] < V or bool((t[V:] != 0).any()):
        raise UserError(f"{name!r}: {t.shape[0]} rows for vocab {V}, padding rows must be zero", field=name)
    return t[:V]


def _qkv(rk: _Ranks, ranks: list[int], name: str, H: int, KV: int, D: int) -> list[torch.Tensor]:
    """q, k, v ([H·D, C], [KV·D, C] ×2) from the per-rank fused [q_r; k_r; v_r]."""
    tp = len(ranks)
    q_rows = H // tp * D
    parts = [rk.get(r, name) for r in ranks]
    kv_rows = (parts[0].shape[0] - q_rows) // 2
    q = torch.cat([p[:q_rows] for p in parts])
    k_r = [p[q_rows : q_rows + kv_rows] for p in parts]
    v_r = [p[q_rows + kv_rows :] for p in parts]
    if KV >= tp:
        return [q, torch.cat(k_r), torch.cat(v_r)]
    reps = tp // KV  # KV heads were duplicated: ranks g·reps … g·reps + reps - 1 hold head g
    out = []
    for per_rank in (k_r, v_r):
        for g in range(KV):
            group = per_rank[g * reps : (g + 1) * reps]
            if any(not torch.equal(group[0], x) for x in group[1:]):
                raise UserError(f"{name!r}: duplicated KV head {g} differs between ranks", field=name)
        out.append(torch.cat([per_rank[g * reps] for g in range(KV)]))
    return [q, *out]


def _layer(rk: _Ranks, ranks: list[int], p: str, cfg: LlamaConfig, input_norm: bool = True) -> dict[str, torch.Tensor]:
    """One decoder layer under TRT-LLM prefix `p`, keyed as in `builder.model.llama.Block`."""
    q, k, v = _qkv(
        rk, ranks, p + "attention.qkv.weight", cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    )
    out = {
        "self_attn.q_proj.weight": q,
        "self_attn.k_proj.weight": k,
        "self_attn.v_proj.weight": v,
        "self_attn.o_proj.weight": rk.cat(ranks, p + "attention.dense.weight", 1),
        "mlp.gate_proj.weight": rk.cat(ranks, p + "mlp.fc.weight", 0),  # fc <- gate_proj
        "mlp.up_proj.weight": rk.cat(ranks, p + "mlp.gate.weight", 0),  # gate <- up_proj
        "mlp.down_proj.weight": rk.cat(ranks, p + "mlp.proj.weight", 1),
        "post_attention_layernorm.weight": rk.same(ranks, p + "post_layernorm.weight"),
    }
    if input_norm:
        out["input_layernorm.weight"] = rk.same(ranks, p + "input_layernorm.weight")
    return out


def _embedding(rk: _Ranks, ranks: list[int], name: str, V: int, parallel: bool) -> torch.Tensor:
    if parallel and len(ranks) > 1:
        return _unpad(rk.cat(ranks, name, 0), V, name)
    return rk.same(ranks, name)


def _llama_cfg(c: dict[str, Any], where: str) -> LlamaConfig:
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": c["hidden_size"],
        "vocab_size": c["vocab_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c.get("head_size"),
        "rms_norm_eps": c["norm_epsilon"],
        "rope_theta": c.get("rotary_base", 10000.0),
        "rope_scaling": c.get("rotary_scaling"),
        "max_position_embeddings": c["max_position_embeddings"],
        "tie_word_embeddings": c.get("tie_word_embeddings", False),
        "hidden_act": c.get("hidden_act", "silu"),
    }
    return LlamaConfig.from_hf_dict(hf, where)


def _layer_counts(rk: _Ranks, pp: int) -> list[int]:
    counts = []
    for p in range(pp):
        local = {int(h.group(1)) for k in rk.t[p * rk.tp] if (h := LAYER.match(k))}
        if local != set(range(len(local))):
            raise UserError(f"pp rank {p}: local layer indices {sorted(local)} are not 0..n-1")
        counts.append(len(local))
    return counts


def read(folder: Path) -> Reassembled:
    """See the module docstring."""
    path = folder / "config.json"
    if not path.is_file():
        raise UserError("no config.json in the TensorRT-LLM checkpoint", location=str(folder))
    config = json.loads(path.read_text(encoding="utf-8"))
    arch = config.get("architecture")
    if arch not in ARCHITECTURES:
        raise UserError(
            f"unsupported architecture {arch!r}",
            location=str(path),
            field="architecture",
            allowed=", ".join(ARCHITECTURES),
        )
    tp, pp = config["mapping"]["tp_size"], config["mapping"]["pp_size"]
    cfg = _llama_cfg(config, str(path))
    rk = _Ranks(folder, tp, pp)
    model, scales, fp8 = _target(rk, cfg, config)
    out = Reassembled(config, cfg, model, scales=scales, fp8_weights=fp8)
    if arch == "MedusaForCausalLM":
        out.medusa = _medusa(rk, cfg, config)
    elif arch == "EagleForCausalLM":
        out.eagle = _eagle(rk, cfg, config, model, scales)
    left = rk.unread()
    if left:
        raise UserError(f"tensors the format does not explain: {', '.join(left[:4])}", location=str(folder))
    return out


def _target(rk: _Ranks, cfg: LlamaConfig, config: dict) -> tuple[Llama, dict[str, torch.Tensor], set[str]]:
    counts = _layer_counts(rk, rk.pp)
    if sum(counts) != cfg.num_hidden_layers:
        raise UserError(f"the rank files hold {sum(counts)} layers, config.json says {cfg.num_hidden_layers}")
    V, parallel = cfg.vocab_size, bool(config.get("use_parallel_embedding"))
    first, last = rk.ranks(0), rk.ranks(rk.pp - 1)
    embed = _embedding(rk, first, "transformer.vocab_embedding.weight", V, parallel)
    state = {"embed_tokens.weight": embed}
    scales: dict[str, torch.Tensor] = {}
    fp8: set[str] = set()
    g = 0
    for p, n in enumerate(counts):
        ranks = rk.ranks(p)
        for i in range(n):
            for k, t in _layer(rk, ranks, f"transformer.layers.{i}.", cfg).items():
                state[f"layers.{g}.{k}"] = t
            _collect_scales(rk, ranks, f"transformer.layers.{i}.", f"transformer.layers.{g}.", scales, fp8)
            g += 1
    state["norm.weight"] = rk.same(last, "transformer.ln_f.weight")
    state["lm_head.weight"] = _unpad(rk.cat(last, "lm_head.weight", 0), V, "lm_head.weight")
    _collect_scales(rk, last, "lm_head.", "lm_head.", scales, fp8)
    if cfg.tie_word_embeddings and not torch.equal(state["lm_head.weight"], state["embed_tokens.weight"]):
        raise UserError("tie_word_embeddings is true but lm_head differs from the embedding", field="lm_head.weight")
    with torch.device("meta"):
        model = Llama(cfg)
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval(), scales, fp8


def _collect_scales(rk: _Ranks, ranks: list[int], local: str, glob: str, scales: dict, fp8: set) -> None:
    """FP8 scales under `local` (replicated over tp), stored under the global prefix `glob`."""
    for name in sorted(rk.t[ranks[0]]):
        if name.startswith(local) and name.endswith("scaling_factor") and (local != "lm_head." or "." not in name[8:]):
            scales[glob + name[len(local) :]] = rk.same(ranks, name)
        elif name.startswith(local) and rk.t[ranks[0]][name].dtype == torch.float8_e4m3fn:
            fp8.add(glob + name[len(local) :])


def _medusa(rk: _Ranks, cfg: LlamaConfig, config: dict) -> MedusaHeads:
    nh, nl, C, V = config["num_medusa_heads"], config["num_medusa_layers"], cfg.hidden_size, cfg.vocab_size
    state: dict[str, torch.Tensor] = {}
    for p in range(rk.pp):  # the heads sit on every rank: each pp rank's copy must agree
        ranks = rk.ranks(p)
        for h in range(nh):
            for layer in range(nl):
                base = f"medusa_heads.{h}.medusa_layers.{layer}.linear."
                for part in ("weight", "bias"):
                    t = rk.cat(ranks, base + part, 0)
                    prev = state.setdefault(f"{h}.{layer}.linear.{part}", t)
                    if not torch.equal(prev, t):
                        raise UserError(f"{base + part!r} differs between pipeline ranks")
            t = _unpad(rk.cat(ranks, f"medusa_heads.{h}.lm_head.weight", 0), V, f"medusa_heads.{h}.lm_head.weight")
            if not torch.equal(state.setdefault(f"{h}.{nl}.weight", t), t):
                raise UserError(f"medusa_heads.{h}.lm_head.weight differs between pipeline ranks")
    heads = MedusaHeads(nh, nl, C, V)
    heads.load_state_dict(state, strict=True)
    return heads.eval()


def _eagle(rk: _Ranks, cfg: LlamaConfig, config: dict, model: Llama, scales: dict) -> EagleDraft:
    dcfg = _llama_cfg(config["eagle_net_config"], "config.json: eagle_net_config")
    ranks, V = rk.ranks(rk.pp - 1), cfg.vocab_size
    parallel = bool(config.get("use_parallel_embedding"))
    nets = []
    for i in range(config["num_eagle_layers"]):
        p = f"eagle_nets.{i}."
        state = {
            "embed_tokens.weight": _embedding(rk, ranks, p + "drafter.vocab_embedding.weight", V, parallel),
            "fc.weight": rk.cat(ranks, p + "drafter.fc.weight", 0),
            "fc.bias": rk.cat(ranks, p + "drafter.fc.bias", 0),
        }
        for j in range(dcfg.num_hidden_layers):
            for k, t in _layer(rk, ranks, f"{p}drafter.layers.{j}.", dcfg, input_norm=j > 0).items():
                state[f"layers.{j}.{k}"] = t
        _collect_scales(rk, ranks, p, p, scales, set())  # KV cache scales of the drafter (1.0)
        head = _unpad(rk.cat(ranks, p + "lm_head.weight", 0), V, p + "lm_head.weight")
        if not torch.equal(head, model.lm_head.weight):
            raise UserError(f"{p}lm_head.weight is not the target's LM head")
        nets.append(state)
    for i, state in enumerate(nets[1:], 1):
        if state.keys() != nets[0].keys() or any(not torch.equal(state[k], nets[0][k]) for k in state):
            raise UserError(f"eagle_nets.{i} differs from eagle_nets.0 (every EagleNet holds the same draft)")
    draft = EagleDraft(dcfg, fc_bias=True)
    draft.load_state_dict(nets[0], strict=True)
    draft.set_lm_head(model.lm_head.weight)
    return draft.eval()
