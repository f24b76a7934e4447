"""Self-distillation data: a target model's own greedy continuations, with its hidden states.

The target continues each prompt greedily; the last hidden state after the final norm is kept at every position.
Medusa heads and an EAGLE draft are trained to predict the target from these (the tokens after the prompt are the
target's own argmax choices, so they are exactly what a greedy target accepts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class Sequences:
    """Token sequences with the target's hidden states; `prompt_len[n]` tokens are given text."""

    tokens: list[torch.Tensor]  # N × [L_n] int64
    hidden: list[torch.Tensor]  # N × [L_n, C] fp32, final-norm last hidden state at every position
    prompt_len: list[int]


@torch.no_grad()
def greedy_with_hidden(
    model,
    prompts: list[list[int]],
    new_tokens: list[int] | int,
    batch: int,
    pad_id: int,
    log: Callable[[str], None] | None = None,
) -> Sequences:
    """Greedy continuation of every prompt (left-padded batches, KV cache), keeping hidden states.

    Returns prompt + `new_tokens` tokens per sequence and the final-norm hidden state at each
    position (the hidden of the last token included: it is what predicts the token after); `log` gets a
    progress line every 4 batches.
    """
    counts = [new_tokens] * len(prompts) if isinstance(new_tokens, int) else list(new_tokens)
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), counts[i]))
    out_tok: list[torch.Tensor] = [torch.empty(0)] * len(prompts)
    out_hid: list[torch.Tensor] = [torch.empty(0)] * len(prompts)
    for b0 in range(0, len(order), batch):
        idx = order[b0 : b0 + batch]
        toks, hids = _greedy_batch(model, [prompts[i] for i in idx], max(counts[i] for i in idx), pad_id)
        for row, i in enumerate(idx):
            keep = len(prompts[i]) + counts[i]
            out_tok[i], out_hid[i] = toks[row][:keep], hids[row][:keep]
        if log is not None and (b0 // batch) % 4 == 0:
            log(f"greedy: {min(b0 + batch, len(order))}/{len(order)} sequences")
    return Sequences(out_tok, out_hid, [len(p) for p in prompts])


def _greedy_batch(model, prompts: list[list[int]], n_new: int, pad_id: int):
    from transformers import DynamicCache

    B, P = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((B, P), pad_id, dtype=torch.int64)  # (B, P) left-padded
    attn = torch.zeros(B, P, dtype=torch.int64)
    for b, p in enumerate(prompts):
        ids[b, P - len(p) :], attn[b, P - len(p) :] = torch.tensor(p), 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P) position ids ignoring the padding
    cache = DynamicCache()
    tokens, hiddens = [ids], []
    x = model.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True)
    hiddens.append(x.last_hidden_state)  # (B, P, C)
    for _ in range(n_new):
        nxt = model.lm_head(hiddens[-1][:, -1]).argmax(-1, keepdim=True)  # (B, 1)
        tokens.append(nxt)
        attn = torch.cat([attn, torch.ones(B, 1, dtype=torch.int64)], dim=1)
        pos = pos[:, -1:] + 1
        x = model.model(input_ids=nxt, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True)
        hiddens.append(x.last_hidden_state)  # (B, 1, C)
    tok, hid = torch.cat(tokens, 1), torch.cat(hiddens, 1)  # (B, P+n), (B, P+n, C)
    starts = [P - len(p) for p in prompts]
    return [tok[b, s:] for b, s in enumerate(starts)], [hid[b, s:] for b, s in enumerate(starts)]
