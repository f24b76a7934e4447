"""An EAGLE-3 draft's vocabulary map: draft id j stands for target token j + d2t[j]; t2d [V] marks those tokens.

Any order of the draft vocabulary is a valid checkpoint. Every runtime maps back by `target = draft + d2t[draft]`
and never asks for an order: TensorRT-LLM adds d2t to the draft argmax (`_torch/speculative/eagle3.py`@001e6700),
SGLang builds `hot_token_id = d2t + arange` (`models/llama_eagle3.py`@03d5a777), vLLM scatters the draft logits
into the full vocabulary at `arange + draft_id_to_target_id` (`models/llama_eagle3.py`@00bd1493). SafeAILab's
trainer writes the tokens ascending (`used_tokens.sort()`, `eagle/traineagle3/cnets.py`@cb7e0841, every stored
version), but modelopt's `calibrate_frequent_vocab` (`torch/speculative/utils.py`, 0.47 and @a2fbac7b) writes them
most frequent first, `d2t[i] = tok_i - i`, and trains the LM head rows in that order (`_map_logits_to_draft_vocab`).

So loading accepts any injective map into the vocabulary (out-of-range and duplicate target ids are refused) and
`in_target_order` puts the LM head rows and d2t in ascending target order together: row r of the permuted head is
the row of the draft id whose token is the r-th smallest, so every draft logit keeps its target token and the
draft's top-k returns the same target ids with the same probabilities. Our drafts are held ascending (ties in a
top-k then go to the lower target id, and `Eagle3Draft.vocab_ids` is sorted as its EAGLE-1 twin's).

numpy only in the checks (`trtspec validate` runs them without torch); torch inside `in_target_order`.
"""

from __future__ import annotations

from typing import Any

from builder.errors import UserError


def check_vocab_map(d2t, t2d, vocab_size: int, source: str, ascending: bool = False) -> None:
    """d2t [Vd] (numpy ints) must map draft ids to distinct target ids inside the vocabulary (in any order; ascending
    too where `ascending`: what `Eagle3Draft.set_vocab_ids` holds); t2d [V] (numpy bool, optional) must be exactly
    their membership (SafeAILab `traineagle3/cnets.py`: t2d[j] = j ∈ used)."""
    import numpy as np

    ids = np.arange(len(d2t), dtype=np.int64) + np.asarray(d2t, dtype=np.int64)
    bad = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if len(bad):
        raise UserError(
            f"d2t maps draft id {int(bad[0])} to token {int(ids[bad[0]])}, outside the target's vocabulary",
            location=source,
            field="d2t",
            allowed=f"draft id + d2t in 0..{vocab_size - 1}",
        )
    order = np.argsort(ids, kind="stable")
    same = np.flatnonzero(ids[order][1:] == ids[order][:-1])
    if len(same):
        a, b = sorted((int(order[same[0]]), int(order[same[0] + 1])))
        raise UserError(
            f"d2t maps draft ids {a} and {b} both to token {int(ids[a])} ({len(same)} duplicate(s)): a draft "
            "vocabulary names each target token once",
            location=source,
            field="d2t",
            allowed="draft id + d2t distinct",
        )
    if ascending and len(ids) > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise UserError(
            "the draft vocabulary's target ids must be ascending here",
            location=source,
            field="d2t",
            allowed="draft id + d2t strictly increasing",
        )
    if t2d is not None:
        member = np.zeros(vocab_size, dtype=bool)
        member[ids] = True
        differ = np.flatnonzero(member != np.asarray(t2d, dtype=bool))
        if len(differ):
            j = int(differ[0])
            raise UserError(
                f"t2d[{j}] is {bool(t2d[j])} but d2t {'maps' if member[j] else 'does not map'} a draft id to token {j} "
                f"({len(differ)} token(s) differ)",
                location=source,
                field="t2d",
                allowed="t2d[j] = (j is draft id + d2t for some draft id)",
            )


def in_target_order(head: Any, d2t: Any) -> tuple[Any, Any]:
    """(LM head [Vd, H], d2t [Vd]) of a checked map (`check_vocab_map`) with the draft ids renumbered in ascending
    target order: the head's rows and the map permuted together (module docstring). Torch tensors; d2t as int64."""
    import torch

    ids = torch.arange(len(d2t), dtype=torch.int64) + d2t.to(torch.int64)  # [Vd] target id of each draft id
    order = torch.argsort(ids)  # [Vd] the draft ids, by target id (distinct: no ties)
    return head[order], ids[order] - torch.arange(len(d2t), dtype=torch.int64)
