"""Incremental detokenization without breaking UTF-8, stateless on the detokenizer's side.

A streamed response carries a *window* of generated ids: `prefix_len` ids whose text was already
sent, then the new ones. The new text is decode(window) minus decode(window[:prefix_len]). Byte-level
BPE (Llama 3) decodes ids to bytes and bytes to text with replacement, so both decodes agree on every
character that starts after the window's first complete one; a character still incomplete at the end
(at most 3 bytes, so within the last 3 ids) decodes to one trailing U+FFFD, which is held back
until a later response completes it (or the final one flushes it). A window therefore reaches back
`LOOKBACK` ids before the first new one; the concatenated deltas equal decode(all ids).
"""

from __future__ import annotations

from typing import Any, Sequence

LOOKBACK = 4  # ids of already-sent text at the start of each window (> the 3 bytes a UTF-8 character can leave pending)
REPLACEMENT = "\ufffd"


def window(ids: Sequence[int], sent: int, final: bool) -> tuple[list[int], int]:
    """The window for a response after `sent` ids were covered: (window ids, prefix_len)."""
    start = max(0, sent - LOOKBACK)
    return list(ids[start:]), sent - start


def _shown(text: str, final: bool) -> str:
    return text if final or not text.endswith(REPLACEMENT) else text[:-1]


def text_delta(tokenizer: Any, ids: Sequence[int], prefix_len: int, final: bool) -> str:
    """The text the new ids of a window add (tokenizer: a `tokenizers.Tokenizer`)."""
    ids = [int(i) for i in ids]
    before = _shown(tokenizer.decode(ids[:prefix_len]), False) if prefix_len else ""
    after = _shown(tokenizer.decode(ids), final)
    return after[len(before) :]
