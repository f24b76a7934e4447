"""The EAGLE-1 draft model in the SafeAILab/EAGLE layout, and its strict safetensors loader.

Upstream (`eagle/model/cnets1.py`, class `Model`): the draft input at pair i is the token embedding of
token t[i+1] concatenated with the target's hidden state h[i] — in that order, `[embed; hidden]` —
fed through `fc: Linear(2C → C, bias)` and then `num_hidden_layers` (1) Llama decoder layers. Layer 0
has no `input_layernorm` (upstream skips it for index 0); there is no final norm. The output predicts
the target's *next* hidden state h[i+1], i.e. the last hidden state after the target's final norm
(`StepOutput.hidden`), so the target's LM head applied to it directly gives draft logits for t[i+2].

Positions: pair (h[i], t[i+1]) sits at position id i (upstream drafts over `input_ids[:, 1:]` from 0);
a draft node at depth d below the newest pair n sits at n + d.

Checkpoint: an upstream-style Llama `config.json` (`num_hidden_layers: 1`, optional `"bias"` for `fc`,
true when absent, as upstream reads it) and `model.safetensors` with keys `fc.weight`, `fc.bias`,
`layers.{i}.self_attn.{q,k,v,o}_proj.weight`, `layers.{i}.mlp.{gate,up,down}_proj.weight`,
`layers.{i}.post_attention_layernorm.weight` (+ `input_layernorm.weight` for i > 0) and, as upstream
saves it, `embed_tokens.weight` — a frozen copy of the target's embedding. The LM head is never
stored: the target's is used.

Upstream's published drafts (e.g. `yuhuili/EAGLE-LLaMA3-Instruct-8B`) ship `pytorch_model.bin` instead: the
same state dict pickled, loaded upstream by `torch.load` + `load_state_dict(strict=True)` into `cnets.Model`
(`eagle/model/ea_model.py`@2320d52e), so its keys are exactly those above (the Llama 3 drafts' config.json
says `"bias": false`: no `fc.bias`, `eagle/train/EAGLE-LLaMA3-Instruct-8B`@8937b4e6). It is read only with
`allow_pickle` (the recipe's `speculative.allow_pickle`), through `torch.load(weights_only=True)`, and
checked exactly as model.safetensors is (`builder.model.pickled`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.model.kv_cache import KVCache
from builder.model.llama import Block, rope_cos_sin, rope_inv_freq
from builder.model.loader import check_keys, layer_shapes, read_draft_weights
from builder.model.pickled import EAGLE
from builder.speculative.eagle.config import EagleConfig
from builder.speculative.method import LoadOptions

WEIGHTS = EAGLE.weights  # model.safetensors
PICKLED_WEIGHTS = EAGLE.pickles[0]  # pytorch_model.bin: read only with allow_pickle


class DraftLayer(Block):
    """A Llama decoder layer; layer 0 reads the fc output un-normed (no `input_layernorm`, as upstream)."""

    def __init__(self, cfg: LlamaConfig, index: int) -> None:
        super().__init__(cfg)
        self.index = index
        if index == 0:
            self.input_layernorm = nn.Identity()  # no parameters, so no state-dict key


class EagleDraft(nn.Module):
    """EAGLE-1 draft: fc([embed(t[i+1]); h[i]]) → decoder layer(s) → predicted h[i+1]."""

    def __init__(self, cfg: LlamaConfig, fc_bias: bool = True) -> None:
        super().__init__()
        self.cfg, self.fc_bias = cfg, fc_bias
        C = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, C)
        self.embed_tokens.weight.requires_grad_(False)  # the target's, frozen (stored, as upstream)
        self.fc = nn.Linear(2 * C, C, bias=fc_bias)
        self.layers = nn.ModuleList(DraftLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.inv_freq = rope_inv_freq(cfg)  # [D/2] fp32; plain attribute (never rounded by .to())
        # The target's LM head, attached by `load_eagle` / `set_lm_head`; never part of the state dict.
        self.register_buffer("lm_head_weight", torch.empty(0), persistent=False)
        # The draft vocabulary (`set_draft_vocab`, `builder.speculative.eagle.vocab`): target token ids of the
        # LM head rows the draft keeps, ascending; None: all of them. `draft_head_weight`: those rows, made once.
        self.vocab_ids: torch.Tensor | None = None
        self.register_buffer("draft_head_weight", torch.empty(0), persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def set_lm_head(self, weight: torch.Tensor) -> None:  # [V, C]
        """Attach the target's LM head weight (used by `logits`)."""
        if tuple(weight.shape) != (self.cfg.vocab_size, self.cfg.hidden_size):
            raise UserError(
                f"LM head shape {tuple(weight.shape)} does not fit the draft "
                f"({self.cfg.vocab_size}, {self.cfg.hidden_size})",
                field="lm_head",
            )
        self.lm_head_weight = weight.detach().to(self.dtype)
        self._draft_head()

    def set_draft_vocab(self, ids) -> None:  # [Vd] int, ascending target token ids; None: the whole vocabulary
        """Draft over these target tokens only (`draft_topk`, and the exported graph's LM head)."""
        if ids is None:
            self.vocab_ids = None
            self._draft_head()
            return
        t = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        V = self.cfg.vocab_size
        if not len(t) or int(t.min()) < 0 or int(t.max()) >= V or not bool((t[1:] > t[:-1]).all()):
            raise ValueError(f"draft vocabulary ids must be ascending, distinct and in 0..{V - 1}")
        self.vocab_ids = t
        self._draft_head()

    @property
    def draft_vocab_size(self) -> int | None:
        """How many tokens the draft drafts over (None: the whole vocabulary)."""
        return None if self.vocab_ids is None else len(self.vocab_ids)

    def _draft_head(self) -> None:
        ids, head = self.vocab_ids, self.lm_head_weight
        self.draft_head_weight = head[ids.to(head.device)] if ids is not None and head.numel() else torch.empty(0)

    def draft_topk(self, draft_hidden: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs, target token ids) of the k best draft tokens, [..., k] each: a log-softmax over the draft
        vocabulary (all of it without `set_draft_vocab`), in float32."""
        if self.lm_head_weight.numel() == 0:
            raise RuntimeError("no LM head attached: call set_lm_head or pass base_lm_head to load_eagle")
        ids = self.vocab_ids
        head = self.lm_head_weight if ids is None else self.draft_head_weight
        top = torch.log_softmax((draft_hidden @ head.T).float(), dim=-1).topk(k, dim=-1)
        return top.values, (top.indices if ids is None else ids.to(top.indices.device)[top.indices])

    def new_cache(self, capacity: int, batch: int = 1) -> KVCache:
        """An empty KV cache for this draft (same commit/compaction semantics as the target's)."""
        c = self.cfg
        return KVCache(
            c.num_hidden_layers,
            batch,
            c.num_key_value_heads,
            c.head_dim,
            capacity,
            dtype=self.dtype,
            device=self.fc.weight.device,
        )

    def forward(
        self,
        tokens: torch.Tensor,  # [B, T] int64: t[i+1] of each pair
        hidden: torch.Tensor,  # [B, T, C]: h[i], the target's (or the draft's own) hidden state
        position_ids: torch.Tensor,  # [B, T] int64: i for pair (h[i], t[i+1]); n + d for a depth-d node
        mask: torch.Tensor,  # [B, T, S] bool over (cache[:start] + new); S = start + T
        cache: KVCache | None = None,  # None: no cache, S = T and start must be 0
        start: int = 0,  # cache slot where the T new pairs' KV is written
    ) -> torch.Tensor:  # -> [B, T, C] predicted h[i+1] (un-normed; feed to the target's LM head)
        B, T = tokens.shape
        if hidden.shape != (B, T, self.cfg.hidden_size):
            raise ValueError(f"hidden must be {(B, T, self.cfg.hidden_size)}, got {tuple(hidden.shape)}")
        if mask.shape != (B, T, start + T) or mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool {(B, T, start + T)}, got {mask.dtype} {tuple(mask.shape)}")
        if cache is None and start != 0:
            raise ValueError("start must be 0 without a cache")
        cos_sin = rope_cos_sin(self.inv_freq.to(tokens.device), position_ids, self.dtype)
        emb = self.embed_tokens(tokens).to(hidden.dtype)  # (B, T, C)
        x = self.fc(torch.cat((emb, hidden), dim=-1))  # (B, T, 2C) -> (B, T, C)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos_sin, mask, None if cache is None else cache.layer(i), start)
        return x

    def logits(self, draft_hidden: torch.Tensor) -> torch.Tensor:  # [..., C] -> [..., V]
        """Draft logits through the target's LM head (attach it first)."""
        if self.lm_head_weight.numel() == 0:
            raise RuntimeError("no LM head attached: call set_lm_head or pass base_lm_head to load_eagle")
        return draft_hidden @ self.lm_head_weight.T

    def config_dict(self, bos_token_id: int, eos_token_id: int, torch_dtype: str) -> dict:
        """An upstream-style `config.json` (a one-layer `LlamaForCausalLM` config plus `bias`)."""
        c = self.cfg
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "bos_token_id": bos_token_id,
            "eos_token_id": eos_token_id,
            "pad_token_id": eos_token_id,
            "hidden_act": "silu",
            "hidden_size": c.hidden_size,
            "intermediate_size": c.intermediate_size,
            "initializer_range": 0.02,
            "max_position_embeddings": c.max_position_embeddings,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads,
            "head_dim": c.head_dim,  # a target whose head_dim is not hidden_size / heads (the regime fixture's)
            "num_hidden_layers": c.num_hidden_layers,
            "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": c.rope_theta,
            "rope_scaling": None,
            "tie_word_embeddings": False,
            "torch_dtype": torch_dtype,
            "use_cache": True,
            "vocab_size": c.vocab_size,
            "bias": self.fc_bias,
        }


def expected_shapes(cfg: LlamaConfig, fc_bias: bool) -> dict[str, tuple[int, ...]]:
    """Every key of an upstream EAGLE-1 draft state dict (embed_tokens included) with its shape."""
    C = cfg.hidden_size
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab_size, C), "fc.weight": (C, 2 * C)}
    if fc_bias:
        shapes["fc.bias"] = (C,)
    for i in range(cfg.num_hidden_layers):
        shapes.update(layer_shapes(cfg, f"layers.{i}.", input_norm=i != 0))  # layer 0: no input_layernorm
    return shapes


def read_eagle(
    path: Path, allow_pickle: bool = False, opt_in: str = "allow_pickle"
) -> tuple[LlamaConfig, bool, dict[str, torch.Tensor], str]:
    """(config, fc bias, tensors as stored, weights file) of the draft in `path`, keys and shapes checked."""
    cfg = LlamaConfig.from_json(path)
    cfg_file = str(path / "config.json")
    bias = json.loads((path / "config.json").read_text(encoding="utf-8")).get("bias", True)
    if not isinstance(bias, bool):
        raise UserError(f"expected true or false, got {bias!r}", location=cfg_file, field="bias")
    tensors, source = read_draft_weights(path, EAGLE, allow_pickle, opt_in)
    check_keys(
        tensors, expected_shapes(cfg, bias), source, "EAGLE-1 draft", optional=frozenset({"embed_tokens.weight"})
    )  # may be absent: the target's embedding is used
    return cfg, bias, tensors, source


def load_eagle(
    path: str | Path,
    base_embed: torch.Tensor,  # [V, C] the target's embed_tokens weight
    base_lm_head: torch.Tensor | None = None,  # [V, C] the target's lm_head weight (enables .logits)
    dtype: torch.dtype = torch.float32,
    allow_pickle: bool = False,
    opt_in: str = "allow_pickle",
) -> EagleDraft:
    """The EAGLE draft in directory `path`, checked key by key against its config.json.

    A stored `embed_tokens.weight` must equal `base_embed` up to half-precision rounding (else the
    draft was trained for another target: `UserError`); the target's exact embedding is then used.
    `allow_pickle` reads upstream's `pytorch_model.bin` when there is no model.safetensors (`opt_in` names the
    setting in the refusal).
    """
    path = Path(path)
    cfg, bias, tensors, source = read_eagle(path, allow_pickle, opt_in)
    expected = expected_shapes(cfg, bias)
    if tuple(base_embed.shape) != expected["embed_tokens.weight"]:
        raise UserError(
            f"target embedding {tuple(base_embed.shape)} does not fit the draft "
            f"{expected['embed_tokens.weight']} (vocab_size, hidden_size)",
            location=source,
        )
    stored = tensors.pop("embed_tokens.weight", None)
    if stored is not None and not torch.allclose(stored.float(), base_embed.float(), rtol=1e-2, atol=1e-3):
        raise UserError(
            "embed_tokens.weight differs from the target's embedding: the draft was trained for another target model",
            location=source,
            field="embed_tokens.weight",
        )
    draft = EagleDraft(cfg, fc_bias=bias)
    tensors["embed_tokens.weight"] = base_embed.detach()
    draft.load_state_dict({k: t.to(dtype) for k, t in tensors.items()}, strict=True)
    draft = draft.to(dtype).eval()
    if base_lm_head is not None:
        draft.set_lm_head(base_lm_head)
    return draft


# -- the method's DraftCheckpoint reader (`method.METHOD.draft`: loader, checker) --


def load_for_recipe(c: EagleConfig, folder: Path, model, opts: LoadOptions):
    """The draft over `model` (its embedding and LM head), drafting over the draft vocabulary where one is asked."""
    draft = load_eagle(
        folder,
        model.embed_tokens.weight,
        model.lm_head.weight,
        dtype=model.dtype,
        allow_pickle=opts.allow_pickle,
        opt_in=opts.opt_in,
    )
    if opts.draft_vocab is not None:
        draft.set_draft_vocab(opts.draft_vocab(model.cfg.vocab_size))
    return draft


def check_folder(folder: Path) -> None:
    read_eagle(folder)
