"""An EAGLE-3 draft trained with NVIDIA modelopt's speculative module, exported as SafeAILab's draft.

modelopt does the EAGLE-3 part (`modelopt.torch.speculative`, 0.47: `mtsp.convert(model, [("eagle", cfg)])` turns an
HF Llama into an `HFEagleModel` whose forward returns the draft's loss): forward hooks capture the target's hidden
states after the aux layers (output-of-layer ids, as ours), `fc` fuses them, one decoder layer over
[embedding; hidden] drafts, the training-time test unrolls it `eagle_ttt_steps` levels on its own outputs, and the
loss is the soft cross-entropy against the target's distribution over the draft vocabulary (d2t), Σ decay^k.
We set the architecture (the target's layer shape, our aux ids, the draft vocabulary, the draft's own RoPE), keep it
off torch.compile (the CPU), and do the loop ourselves (`builder.train.runner`: checkpoints, resume).

One correction, so that what is trained is what every runtime runs (`ReferenceFirstLayer`). modelopt builds the
draft layer from transformers' `LlamaDecoderLayer`, whose forward normalises its input with `input_layernorm`
before attention (transformers `models/llama/modeling_llama.py` `LlamaDecoderLayer.forward`, L313-316 in 5.14), and
then replaces the attention's input in a pre-hook by `cat(input_layernorm(embeds), hidden_norm(x))` where x is that
already-normalised input (modelopt `torch/speculative/plugins/modeling_eagle.py` `_eagle3_attention_forward_pre_hook`,
L114-127 in 0.47; unchanged at NVIDIA/Model-Optimizer@a2fbac7b). So modelopt computes
`hidden_norm(input_layernorm(h))` where SafeAILab's reference (EAGLE `eagle/model/cnets.py` `LlamaDecoderLayeremb`),
TensorRT-LLM (`Eagle3DecoderLayer`), SGLang and vLLM compute `hidden_norm(h)`, with one `input_layernorm` weight
serving both the embeddings and h. RMSNorm is scale-invariant, so the two agree while input_layernorm's weight is
all ones (up to eps), and part ways as soon as it trains — and it cannot be folded into `hidden_norm`
(rms(w ⊙ x) is not a multiple of rms(x)). We swap the layer's class for one whose forward skips that first norm:
the same modules and tensor names, modelopt's hook and loss unchanged, SafeAILab's math.
`tests/unit/test_train_draft.py` shows both: modelopt's own forward equals `hidden_norm(input_layernorm(h))`, ours
equals our `Eagle3Draft` loaded from modelopt's export.
"""

from __future__ import annotations

import contextlib
import copy
import io
from pathlib import Path
from typing import Sequence

import torch
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from builder.recipe.draft_training import DraftTraining


class ReferenceFirstLayer(LlamaDecoderLayer):
    """modelopt's EAGLE-3 draft layer with SafeAILab's math: no `input_layernorm` on h before attention (modelopt's
    pre-hook normalises the embeddings with input_layernorm and h with hidden_norm); residual raw h; then
    post_attention_layernorm + MLP as transformers' layer."""

    def forward(self, hidden_states: torch.Tensor, **kwargs) -> torch.Tensor:  # [B, T, H] -> [B, T, H]
        attn, _ = self.self_attn(hidden_states=hidden_states, **kwargs)  # the pre-hook makes its input 2H wide
        x = hidden_states + attn
        return x + self.mlp(self.post_attention_layernorm(x))


def modelopt_config(
    target_cfg, run: DraftTraining, aux: Sequence[int], draft_vocab: int, dtype: torch.dtype = torch.float32
) -> dict:
    """modelopt's EagleConfig dict for this target: EAGLE3_DEFAULT_CFG with the target's layer shape."""
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG

    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    heads = target_cfg.num_attention_heads
    cfg["eagle_architecture_config"].update(
        num_attention_heads=heads,
        num_key_value_heads=target_cfg.num_key_value_heads,
        head_dim=getattr(target_cfg, "head_dim", None) or target_cfg.hidden_size // heads,
        intermediate_size=target_cfg.intermediate_size,
        rms_norm_eps=target_cfg.rms_norm_eps,
        rope_theta=run.rope_theta,
        rope_scaling={"rope_type": "default", "rope_theta": run.rope_theta},
        eagle_aux_hidden_state_layer_ids=list(aux),
        draft_vocab_size=draft_vocab,
        torch_dtype=str(dtype).removeprefix("torch."),
        has_lm_head=True,  # its own LM head even over the whole vocabulary, as SafeAILab's
    )
    cfg.update(
        eagle_use_torch_compile=False,
        eagle_export_rope_scaling={},  # keep the trained RoPE (the default would inject YaRN at export)
        eagle_ttt_steps=run.ttt_steps,
        eagle_loss_decay_factor=run.loss_decay,
        eagle_report_acc=True,
    )
    return cfg


def convert(model, run: DraftTraining, aux: Sequence[int], vocab_ids: torch.Tensor | None, reference_math: bool = True):
    """Make `model` (an HF LlamaForCausalLM) modelopt's EAGLE-3 model in place: draft initialised from `run.seed`,
    d2t from `vocab_ids` ([Vd] ascending target ids; None: the whole vocabulary), SafeAILab's math unless
    `reference_math` is False (module docstring; False only to show modelopt's own)."""
    import modelopt.torch.speculative as mtsp

    vocab = model.config.vocab_size
    vd = vocab if vocab_ids is None else len(vocab_ids)
    torch.manual_seed(run.seed)
    with contextlib.redirect_stdout(io.StringIO()):  # modelopt prints where it found the model's parts
        mtsp.convert(model, [("eagle", modelopt_config(model.config, run, aux, vd, model.dtype))])
    layer = model.eagle_module.layers[0]
    if type(layer) is not LlamaDecoderLayer:
        raise RuntimeError(f"modelopt's draft layer is {type(layer).__name__}, not LlamaDecoderLayer")
    if reference_math:
        layer.__class__ = ReferenceFirstLayer
    if vocab_ids is not None:
        with torch.no_grad():
            model.eagle_module.d2t.copy_(vocab_ids.to(torch.int64) - torch.arange(vd))
    return model


def trainable(model) -> dict[str, torch.nn.Parameter]:
    """The draft's trainable tensors by name (the target is frozen: eagle_freeze_base_model)."""
    return {k: p for k, p in model.eagle_module.named_parameters() if p.requires_grad}


def loss_fn(model):
    """The runner's step loss: modelopt's EAGLE-3 loss over the batch, and its accuracy per TTT step."""

    def step(tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
        out = model(input_ids=tokens, attention_mask=mask.to(torch.int64))
        return out.loss, list(out.train_acc[0])

    return step


def export_modelopt(model, folder: Path) -> Path:
    """modelopt's own export (`export_speculative_decoding`: config.json + model.safetensors, `layers.0.*`)."""
    from modelopt.torch.export import export_speculative_decoding

    model.eval()
    with contextlib.redirect_stdout(io.StringIO()):
        export_speculative_decoding(model, export_dir=folder)
    return folder


@torch.no_grad()
def modelopt_draft_step(
    model,
    tokens: torch.Tensor,  # [B, T] t[i+1] of each pair
    features: torch.Tensor,  # [B, T, 3·Ht] the target's hidden states after the aux layers, low → high
) -> tuple[torch.Tensor, torch.Tensor]:  # -> x [B, T, H] pre-norm, logits [B, T, Vd]
    """One causal draft pass through modelopt's own code (`HFEagleModel._eagle_forward`: fc, the layer with its
    pre-hook, norm, LM head) at positions 0..T-1 — what its training's first TTT step computes."""
    em = model.eagle_module
    B, T = tokens.shape
    h = em.fc(features.to(em.fc.weight.dtype))  # (B, T, H)
    causal = torch.ones(T, T, dtype=torch.bool, device=h.device).tril()
    # (B, 1, T, T) additive, as modelopt's `_prepare_decoder_attention_mask` (whose float32 fill overflows for float64)
    mask = torch.zeros(B, 1, T, T, dtype=h.dtype, device=h.device).masked_fill(~causal, torch.finfo(h.dtype).min)
    em._maybe_init_rope(device=h.device)
    embeds = model._base_model_embeddings(tokens)
    _, x, logits, _ = model._eagle_forward(h, embeds, mask, torch.arange(T, device=h.device).expand(B, T))
    return x, logits


@torch.no_grad()
def modelopt_aux_states(model, tokens: torch.Tensor) -> torch.Tensor:  # [B, L] -> [B, L, 3·Ht]
    """The target's hidden states as modelopt's forward hooks capture them (its base forward)."""
    out, _ = model._eagle_base_model_forward(tokens, None, None, None, True, None)
    return out.aux_hiddens
