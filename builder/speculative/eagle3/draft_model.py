"""The EAGLE-3 draft model (SafeAILab/EAGLE `eagle/model/cnets.py`, `../shared/EAGLE3.md` §1), its loader and writer.

Pairs are EAGLE-1's (`builder.speculative.eagle.draft_model`): pair (h[i], t[i+1]) at position i. What differs:
- h[i] from the target is the concatenation of three of its hidden states (the residual stream after the
  `aux_layers`, output-of-layer ids, low → high: `Llama.forward(features=…)`), [3·Ht]; `fc` (3·Ht → H, no bias)
  maps it to the draft width. Later draft levels feed the draft's own output x (width H) back, which skips fc —
  upstream tells the two apart by width, and so does `forward`.
- The one decoder layer ("midlayer") attends over `[input_layernorm(embed(t)); hidden_norm(h)]` (q/k/v take 2H),
  its residual is the raw h, then post_attention_layernorm + SwiGLU as usual. Output x is pre-norm.
- Logits are the draft's own: `lm_head(norm(x))` over the draft vocabulary Vd; draft id j is target token
  j + d2t[j] (`vocab_ids`, ascending). The target's LM head is not used.
- RoPE from the draft's own config.
- The draft embeds with the target's embedding (not stored), except a draft of another width than its target
  (`target_hidden_size` ≠ hidden_size, as SafeAILab's Llama 3.3 70B draft), which carries its own.

The ONNX export folds `fc` into the target step graph (it is linear and per position, so fc of the accepted rows is
the accepted rows of fc): the target graph's `hidden` is then H wide like EAGLE-1's and both draft calls take H.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.model.kv_cache import KVCache
from builder.model.llama import MLP, Attention, RMSNorm, rope_cos_sin, rope_inv_freq
from builder.model.loader import read_draft_weights
from builder.speculative.eagle3.checkpoint import (
    ARCHITECTURE,
    EAGLE3,
    MODELOPT_PREFIX,
    SAFEAILAB_PREFIX,
    DraftShape,
    canonical_name,
    check_entries,
    check_fc_width,
    check_vocab_map,
    in_target_order,
    input_of_layer,
    read_shape,
    resolve_aux_layers,
)
from builder.speculative.eagle3.config import Eagle3Config
from builder.speculative.method import LoadOptions


class Eagle3Layer(nn.Module):
    """The midlayer: attention over [input_layernorm(embed); hidden_norm(h)] (2H in), residual h, then the MLP."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        H = cfg.hidden_size
        self.input_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        a = self.self_attn
        a.q_proj = nn.Linear(2 * H, a.n_head * a.head_dim, bias=False)
        a.k_proj = nn.Linear(2 * H, a.n_kv * a.head_dim, bias=False)
        a.v_proj = nn.Linear(2 * H, a.n_kv * a.head_dim, bias=False)
        self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self,
        emb: torch.Tensor,  # [B, T, H] token embeddings
        h: torch.Tensor,  # [B, T, H] fc(target features) or the draft's previous output
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,  # [B, T, S] bool
        kv: tuple[torch.Tensor, torch.Tensor] | None,
        start: int,
    ) -> torch.Tensor:  # -> [B, T, H] x (pre-norm)
        a = torch.cat((self.input_layernorm(emb), self.hidden_norm(h)), dim=-1)  # (B, T, 2H)
        x = h + self.self_attn(a, cos_sin, mask, kv, start)
        return x + self.mlp(self.post_attention_layernorm(x))


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft (module docstring). The API of `builder.speculative.eagle.draft_model.EagleDraft` where the
    engines and drafters use it (`forward`, `draft_topk`, `new_cache`, `dtype`, `draft_vocab_size`, `vocab_ids`)."""

    def __init__(
        self, cfg: LlamaConfig, target_hidden: int, draft_vocab: int, aux_layers: Sequence[int] = (0, 1, 2)
    ) -> None:
        super().__init__()
        self.cfg, self.target_hidden = cfg, target_hidden
        self.aux_layers = tuple(int(i) for i in aux_layers)
        H = cfg.hidden_size
        if 3 * target_hidden == H:
            raise ValueError("a draft 3× as wide as its target cannot tell features from its own output")
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H)
        self.embed_tokens.weight.requires_grad_(False)  # the target's, frozen
        self.fc = nn.Linear(3 * target_hidden, H, bias=False)
        self.midlayer = Eagle3Layer(cfg)
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, draft_vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.int64))  # target id = draft id + d2t
        self.inv_freq = rope_inv_freq(cfg)  # [D/2] fp32; plain attribute (never rounded by .to())

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def num_layers(self) -> int:
        return 1

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        """Target token ids of the draft vocabulary's rows, ascending; None when it is the whole vocabulary."""
        if self.lm_head.out_features == self.cfg.vocab_size:
            return None
        return torch.arange(self.lm_head.out_features, dtype=torch.int64) + self.d2t

    @property
    def draft_vocab_size(self) -> int | None:
        return None if self.lm_head.out_features == self.cfg.vocab_size else self.lm_head.out_features

    def set_vocab_ids(self, ids: torch.Tensor) -> None:  # [Vd] ascending target ids
        t = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        check_d2t(t - torch.arange(len(t)), self.cfg.vocab_size, "d2t", ascending=True)
        self.d2t = t - torch.arange(len(t))

    def project(self, features: torch.Tensor) -> torch.Tensor:  # [..., 3·Ht] -> [..., H]
        return self.fc(features)

    def new_cache(self, capacity: int, batch: int = 1) -> KVCache:
        c = self.cfg
        return KVCache(
            1, batch, c.num_key_value_heads, c.head_dim, capacity, dtype=self.dtype, device=self.fc.weight.device
        )

    def forward(
        self,
        tokens: torch.Tensor,  # [B, T] int64: t[i+1] of each pair
        hidden: torch.Tensor,  # [B, T, 3·Ht] target features, or [B, T, H] (fc folded in, or the draft's own x)
        position_ids: torch.Tensor,  # [B, T] int64
        mask: torch.Tensor,  # [B, T, S] bool over (cache[:start] + new)
        cache: KVCache | None = None,
        start: int = 0,
    ) -> torch.Tensor:  # -> [B, T, H] x, pre-norm (the next level's h; `draft_topk` for its tokens)
        B, T = tokens.shape
        H = self.cfg.hidden_size
        if hidden.shape[:2] != (B, T) or hidden.shape[-1] not in (H, 3 * self.target_hidden):
            raise ValueError(f"hidden must be ({B}, {T}, {3 * self.target_hidden} or {H}), got {tuple(hidden.shape)}")
        if mask.shape != (B, T, start + T) or mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool {(B, T, start + T)}, got {mask.dtype} {tuple(mask.shape)}")
        if cache is None and start != 0:
            raise ValueError("start must be 0 without a cache")
        h = hidden.to(self.dtype)
        if h.shape[-1] == 3 * self.target_hidden:  # the target's features (upstream's rule: by width)
            h = self.fc(h)
        cos_sin = rope_cos_sin(self.inv_freq.to(tokens.device), position_ids, self.dtype)
        emb = self.embed_tokens(tokens).to(self.dtype)
        return self.midlayer(emb, h, cos_sin, mask, None if cache is None else cache.layer(0), start)

    def logits(self, x: torch.Tensor) -> torch.Tensor:  # [..., H] -> [..., Vd] over the draft vocabulary
        return self.lm_head(self.norm(x))

    def draft_topk(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs, target token ids) of the k best draft tokens, [..., k] each, float32."""
        top = torch.log_softmax(self.logits(x).float(), dim=-1).topk(k, dim=-1)
        ids = self.vocab_ids
        return top.values, (top.indices if ids is None else ids.to(top.indices.device)[top.indices])

    # -- checkpoints --

    def config_dict(self, layout: str = "safeailab", torch_dtype: str = "float32") -> dict:
        """config.json of either layout (module docstring of `checkpoint`; the modelopt one with the keys of modelopt
        0.47's template, `hf_spec_configs.llama_eagle_template_config`). The aux ids, output-of-layer, ascending, in
        eagle_config (modelopt, SGLang; TensorRT-LLM takes them from the LLM-API options) and, +1, in the top-level
        key vLLM reads; `draft_vocab_size` always (TensorRT-LLM's two-model flow detects EAGLE-3 by it); no YaRN (the
        draft's own RoPE, as trained). `docs/eagle3-checkpoints.md` has what each runtime reads."""
        _check_layout(layout)
        c = self.cfg
        out = {
            "architectures": [ARCHITECTURE],
            "model_type": "llama",
            "hidden_act": "silu",
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "head_dim": c.head_dim,
            "num_hidden_layers": 1,
            "rms_norm_eps": c.rms_norm_eps,
            "max_position_embeddings": c.max_position_embeddings,
            "rope_theta": c.rope_theta,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "torch_dtype": torch_dtype,
            "vocab_size": c.vocab_size,
            "draft_vocab_size": self.lm_head.out_features,
            "target_hidden_size": self.target_hidden,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": sorted(self.aux_layers), "use_aux_hidden_state": True},
            # vLLM reads only this key, in input-of-layer ids (`checkpoint.config_aux_layers` checks they agree)
            "eagle_aux_hidden_state_layer_ids": list(input_of_layer(tuple(sorted(self.aux_layers)))),
        }
        if c.rope_scaling is not None:
            s = c.rope_scaling
            out["rope_scaling"] = {
                "rope_type": "llama3",
                "factor": s.factor,
                "low_freq_factor": s.low_freq_factor,
                "high_freq_factor": s.high_freq_factor,
                "original_max_position_embeddings": s.original_max_position_embeddings,
            }
        if layout == "modelopt":
            out["eagle_config"].update(
                use_input_layernorm_in_first_layer=True,
                use_last_layernorm=True,
                use_mtp_layernorm=False,
                next_layer_regular=True,
                parallel_draft_step=1,
                parallel_draft_heads_num_layers=1,
            )
        return out

    def state_for(self, layout: str = "safeailab", dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The tensors of a checkpoint in `layout` ("safeailab": midlayer.*, d2t, t2d; "modelopt": layers.0.*, d2t
        only when Vd < V, as modelopt 0.47's exporter writes). The embedding is left out (the target's) unless the
        draft's width differs from the target's (its own, in the SafeAILab layout only: modelopt never writes one)."""
        _check_layout(layout)
        own = self.target_hidden != self.cfg.hidden_size
        if own and layout == "modelopt":
            raise ValueError("modelopt's layout has no embed_tokens: a draft of another width than its target needs it")
        dtype = dtype or self.dtype
        out: dict[str, torch.Tensor] = {}
        for k, t in self.state_dict().items():
            if k == "d2t" or (k == "embed_tokens.weight" and not own):
                continue
            if layout == "modelopt" and k.startswith(SAFEAILAB_PREFIX):
                k = MODELOPT_PREFIX + k[len(SAFEAILAB_PREFIX) :]
            out[k] = t.detach().to(dtype).contiguous()
        if layout == "safeailab" or self.draft_vocab_size is not None:
            out["d2t"] = self.d2t.clone()
        if layout == "safeailab":
            t2d = torch.zeros(self.cfg.vocab_size, dtype=torch.bool)
            t2d[torch.arange(self.lm_head.out_features) + self.d2t] = True
            out["t2d"] = t2d
        return out

    def save(self, folder: str | Path, layout: str = "safeailab", dtype: torch.dtype | None = None) -> Path:
        """Write config.json + model.safetensors in `layout` into `folder` (replaced files, written whole)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        dtype = dtype or self.dtype
        name = str(dtype).removeprefix("torch.")
        tmp = folder / (EAGLE3.weights + ".tmp")
        save_file(self.state_for(layout, dtype), str(tmp), metadata={"format": "pt"})
        tmp.replace(folder / EAGLE3.weights)
        (folder / "config.json").write_text(json.dumps(self.config_dict(layout, name), indent=2) + "\n", "utf-8")
        return folder


LAYOUTS = ("safeailab", "modelopt")


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


# safetensors' dtype names for the dtypes a checkpoint may hold (`checkpoint.check_entries` checks them)
ST_DTYPE = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.bool: "BOOL",
    torch.float64: "F64",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}


def check_d2t(
    d2t: torch.Tensor, vocab_size: int, source: str, t2d: torch.Tensor | None = None, ascending: bool = False
) -> None:
    """d2t must map draft ids to distinct target ids inside the vocabulary (ascending too where `ascending`); t2d,
    when given, must be their membership (`checkpoint.check_vocab_map`)."""
    check_vocab_map(d2t.cpu().numpy(), None if t2d is None else t2d.cpu().numpy(), vocab_size, source, ascending)


def read_eagle3(
    folder: Path, allow_pickle: bool = False, opt_in: str = "allow_pickle"
) -> tuple[DraftShape, dict[str, torch.Tensor], str]:
    """(shape, tensors under SafeAILab's names, weights file) of the draft in `folder`: keys, shapes, dtypes and the
    vocabulary map (d2t, t2d) checked."""
    shape = read_shape(folder)
    stored, source = read_draft_weights(folder, EAGLE3, allow_pickle, opt_in)
    entries = {
        k: (tuple(t.shape), ST_DTYPE.get(t.dtype, str(t.dtype).removeprefix("torch."))) for k, t in stored.items()
    }
    check_entries(entries, shape, source)
    tensors = {canonical_name(k): t for k, t in stored.items()}
    if "d2t" in tensors:
        check_d2t(tensors["d2t"], shape.cfg.vocab_size, source, tensors.get("t2d"))
    return shape, tensors, source


def same_embedding(stored: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether `stored` is `base` up to rounding to the coarser of their dtypes: |s - b| ≤ eps·|b| + smallest normal
    (round-to-nearest errs by at most eps/2 relative, less than the smallest normal in the subnormal range)."""
    coarse = max((stored.dtype, base.dtype), key=lambda d: torch.finfo(d).eps)
    f = torch.finfo(coarse)
    s, b = stored.double(), base.double()
    return bool(((s - b).abs() <= f.eps * b.abs() + f.smallest_normal).all())


def load_eagle3(
    folder: str | Path,
    base_embed: torch.Tensor,  # [V, Ht] the target's embed_tokens weight
    num_target_layers: int,
    aux_layers: Sequence[int] | None = None,  # the recipe's (output-of-layer); None: the checkpoint's or default
    dtype: torch.dtype = torch.float32,
    allow_pickle: bool = False,
    opt_in: str = "allow_pickle",
) -> Eagle3Draft:
    """The EAGLE-3 draft in `folder` over a target (its embedding, its layer count), strictly checked. The draft
    embeds with the target's embedding, or with its own when its width differs from the target's
    (`DraftShape.own_embedding`); a stored copy of the target's must equal it (up to the stored dtype)."""
    folder = Path(folder)
    shape, tensors, source = read_eagle3(folder, allow_pickle, opt_in)
    check_fc_width(folder, shape, int(base_embed.shape[1]))
    V, H = shape.cfg.vocab_size, shape.cfg.hidden_size
    if int(base_embed.shape[0]) != V:
        raise UserError(
            f"the target's vocabulary has {int(base_embed.shape[0])} tokens, the draft's config.json says {V}",
            location=source,
            field="vocab_size",
            allowed=str(int(base_embed.shape[0])),
        )
    aux = resolve_aux_layers(aux_layers, shape.aux_layers, num_target_layers, str(folder / "config.json"))
    stored = tensors.pop("embed_tokens.weight", None)
    if shape.own_embedding:
        embed = stored  # [V, H]: check_entries made it required
    else:
        if stored is not None and not same_embedding(stored, base_embed):
            raise UserError(
                "embed_tokens.weight differs from the target's embedding: the draft was trained for another target",
                location=source,
                field="embed_tokens.weight",
            )
        embed = base_embed.detach()
    tensors.pop("t2d", None)  # checked against d2t; the draft keeps d2t only
    draft = Eagle3Draft(shape.cfg, shape.target_hidden, shape.draft_vocab, aux)
    tensors["embed_tokens.weight"] = embed
    d2t = tensors.pop("d2t", None)
    if d2t is not None:  # any order on disk (modelopt: most frequent first); held ascending (`vocab_map`)
        tensors["lm_head.weight"], d2t = in_target_order(tensors["lm_head.weight"], d2t)
    tensors["d2t"] = torch.zeros(shape.draft_vocab, dtype=torch.int64) if d2t is None else d2t
    draft.load_state_dict({k: (t if k == "d2t" else t.to(dtype)) for k, t in tensors.items()}, strict=True)
    assert tuple(draft.embed_tokens.weight.shape) == (V, H)
    return draft.to(dtype).eval()


def random_draft(
    target_cfg: LlamaConfig,
    aux_layers: Sequence[int],
    *,
    draft_vocab: int | None = None,
    seed: int = 0,
    base_embed: torch.Tensor | None = None,
    std: float = 0.05,
) -> Eagle3Draft:
    """A random EAGLE-3 draft for a target of `target_cfg` (tests; `devtools`): the target's layer shape, a draft
    vocabulary of the first-by-a-random-draw `draft_vocab` tokens (ascending), random weights."""
    g = torch.Generator().manual_seed(seed)
    vd = draft_vocab or target_cfg.vocab_size
    d = Eagle3Draft(target_cfg, target_cfg.hidden_size, vd, aux_layers)
    with torch.no_grad():
        for name, p in d.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))
        if base_embed is not None:
            d.embed_tokens.weight.copy_(base_embed)
    if vd < target_cfg.vocab_size:
        ids = torch.randperm(target_cfg.vocab_size, generator=g)[:vd].sort().values
        d.set_vocab_ids(ids)
    return d.eval()


# -- the method's DraftCheckpoint reader (`method.METHOD.draft`: loader, checker) --


def load_for_recipe(c: Eagle3Config, folder: Path, model, opts: LoadOptions) -> Eagle3Draft:
    """The draft over `model` (its embedding; its aux layers per the recipe, the checkpoint or upstream)."""
    return load_eagle3(
        folder,
        model.embed_tokens.weight,
        model.cfg.num_hidden_layers,
        c.aux_layers,
        dtype=model.dtype,
        allow_pickle=opts.allow_pickle,
        opt_in=opts.opt_in,
    )


def check_folder(folder: Path) -> None:
    read_eagle3(folder)
