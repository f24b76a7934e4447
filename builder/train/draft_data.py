"""The sequences `trtspec train-draft` trains on (`builder.recipe.draft_training.DraftTraining`), and their order.

Two ways to make `num_samples` rows of `seq_len` tokens:
* text as it is (`generate_responses: false`): the source's documents, each `[BOS] text [EOS]`, concatenated into
  one stream, cut into windows at evenly spaced offsets over the whole stream (so every part of a corpus counts,
  not its first files);
* the target's own text (`generate_responses: true`): prompts of at most `seq_len - response_tokens` tokens (a
  jsonl 'prompt', a conversation up to its last turn, or windows of the text as above), each continued greedily by
  the target for `response_tokens` tokens. Rows are prompt + response, right-padded where a prompt is shorter.

Either way the draft's loss is against the target's own distribution at every position (modelopt's logit
self-distillation), so prompt positions teach it too; padding (`mask` False) is left out.

`rows_at(step)`: the rows of step s — an epoch's seeded permutation, so the order is a function of (seed, step)
alone and a resumed run reads exactly the rows the uninterrupted one would.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import torch

from builder.errors import UserError
from builder.recipe.draft_training import DraftTraining

FIELD = "draft_training.source"
ROLE_KEYS, TEXT_KEYS = ("role", "from"), ("content", "value")


@dataclass(frozen=True)
class Example:
    """One document of the source: text to train on, or a prompt (with an optional given response)."""

    text: str
    is_prompt: bool = False


@dataclass(frozen=True)
class TrainingSet:
    """The rows: tokens [N, L] int64 and mask [N, L] bool (False: right padding)."""

    tokens: torch.Tensor
    mask: torch.Tensor

    def digest(self) -> str:
        h = hashlib.sha256(self.tokens.numpy().tobytes())
        h.update(self.mask.numpy().tobytes())
        return h.hexdigest()

    def rows_at(self, step: int, batch: int, seed: int) -> torch.Tensor:  # -> [batch] int64 row ids
        """The rows of optimizer step `step` (module docstring)."""
        n = len(self.tokens)
        first, out = step * batch, []
        while len(out) < batch:
            epoch, offset = divmod(first + len(out), n)
            order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
            out.extend(order[offset : offset + batch - len(out)].tolist())
        return torch.tensor(out, dtype=torch.int64)

    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        tmp = path.with_name(path.name + ".tmp")
        save_file({"tokens": self.tokens, "mask": self.mask.to(torch.uint8)}, str(tmp))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> TrainingSet:
        from safetensors.torch import load_file

        t = load_file(str(path))
        return cls(t["tokens"], t["mask"].bool())


# -- the source's documents --


def source_identity(source: str, base_dir: Path) -> dict:
    """What identifies the source's text (for the run's key): the builtin's data or the jsonl file's sha256."""
    from builder.files import sha256_file

    if source == "builtin:stdlib":
        from builder.data.corpus import load_corpus

        return {"source": source, "sha256": load_corpus().digest()}
    if source == "builtin:humaneval":
        from builder.data.humaneval import humaneval_path

        return {"source": source, "sha256": sha256_file(humaneval_path())}
    return {"source": source, "sha256": sha256_file(resolve_source(source, base_dir))}


def resolve_source(source: str, base_dir: Path) -> Path:
    path = Path(source)
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise UserError(f"training data file missing: {path}", field=FIELD)
    return path


def examples(source: str, base_dir: Path, prompts: bool) -> Iterator[Example]:
    """The source's documents in order; `prompts`: as prompts where the source has them (HumanEval, jsonl)."""
    if source == "builtin:stdlib":
        from builder.data.corpus import load_corpus

        yield from (Example(f.text) for f in load_corpus().train)
    elif source == "builtin:humaneval":
        from builder.data.humaneval import load_humaneval

        for row in load_humaneval():
            yield Example(row["prompt"], True) if prompts else Example(row["prompt"] + row["canonical_solution"])
    else:
        yield from _jsonl(resolve_source(source, base_dir), prompts)


def _jsonl(path: Path, prompts: bool) -> Iterator[Example]:
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                yield _example(_json_line(line, f"{path}:{n}"), f"{path}:{n}", prompts)


def _json_line(line: str, where: str) -> dict:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise UserError(f"not JSON: {exc}", location=where, field=FIELD) from None
    if not isinstance(row, dict):
        raise UserError("each line must be a JSON object", location=where, field=FIELD)
    return row


def _example(row: dict, where: str, prompts: bool) -> Example:
    if isinstance(row.get("text"), str):
        return Example(row["text"])
    if isinstance(row.get("prompt"), str):
        response = row.get("response", row.get("completion"))
        if response is not None and not isinstance(response, str):
            raise UserError("'response' must be a string", location=where, field=FIELD)
        if prompts or response is None:
            return Example(row["prompt"], True)
        return Example(row["prompt"] + response)
    turns = row.get("messages", row.get("conversations"))
    if isinstance(turns, list) and turns:
        lines = [_turn(t, where) for t in turns]
        if prompts and len(lines) > 1:  # the conversation up to its last turn, which the target then writes
            return Example("".join(lines[:-1]) + _role_of(turns[-1]) + ": ", True)
        return Example("".join(lines))
    raise UserError(
        "a line needs 'text', 'prompt' or a non-empty 'messages' / 'conversations' list",
        location=where,
        field=FIELD,
        allowed="text | prompt (+ response) | messages | conversations",
    )


def _role_of(turn: dict) -> str:
    return next(str(turn[k]) for k in ROLE_KEYS if k in turn)


def _turn(turn, where: str) -> str:
    if not isinstance(turn, dict) or not any(k in turn for k in ROLE_KEYS) or not any(k in turn for k in TEXT_KEYS):
        raise UserError("a turn needs role|from and content|value", location=where, field=FIELD)
    text = next(turn[k] for k in TEXT_KEYS if k in turn)
    return f"{_role_of(turn)}: {text}\n"


# -- rows --


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def windows(stream: list[int], length: int, count: int) -> list[list[int]]:
    """`count` windows of `length` tokens at evenly spaced offsets over the whole stream (overlapping only when the
    stream holds fewer than count × length tokens)."""
    if len(stream) < length:
        raise UserError(
            f"the training text holds {len(stream)} tokens, fewer than one sequence of {length}",
            field=FIELD,
        )
    last = len(stream) - length
    starts = [0] if count == 1 else [round(i * last / (count - 1)) for i in range(count)]
    return [stream[s : s + length] for s in starts]


def text_stream(tokenizer, docs: Iterator[Example], bos: int | None, eos: int | None, need: int) -> list[int]:
    """[BOS] doc [EOS] … for documents until `need` tokens are collected (all of them when need < 0)."""
    stream: list[int] = []
    for doc in docs:
        stream += ([bos] if bos is not None else []) + encode(tokenizer, doc.text) + ([eos] if eos is not None else [])
        if 0 <= need <= len(stream):
            break
    return stream


def prompt_ids(run: DraftTraining, tokenizer, docs: list[Example], bos: int | None, eos: int | None) -> list[list[int]]:
    """`num_samples` prompts of at most `prompt_tokens` tokens: the source's own prompts (their last tokens), else
    windows of its text."""
    P, n = run.prompt_tokens, run.num_samples
    if docs and all(d.is_prompt for d in docs):
        if len(docs) < n:
            raise UserError(
                f"{run.source} holds {len(docs)} prompts, num_samples asks for {n}",
                field="draft_training.num_samples",
                allowed=f"1..{len(docs)}",
            )
        return [([bos] if bos is not None else []) + encode(tokenizer, d.text) for d in docs[:n]]
    return windows(text_stream(tokenizer, iter(docs), bos, eos, -1), P, n)


@torch.no_grad()
def greedy_continuations(
    model, prompts: list[list[int]], new_tokens: int, batch: int, pad_id: int, tick: Callable[[int], None]
) -> list[list[int]]:
    """Each prompt's greedy continuation by `model` (an HF causal LM; left-padded batches of similar lengths, KV
    cache): `new_tokens` tokens each, end-of-text included (the target's text after it is its text too)."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[list[int]] = [[] for _ in prompts]
    for b0 in range(0, len(order), batch):
        idx = order[b0 : b0 + batch]
        B, P = len(idx), max(len(prompts[i]) for i in idx)
        ids = torch.full((B, P), pad_id, dtype=torch.int64)  # (B, P) left-padded
        attn = torch.zeros(B, P, dtype=torch.int64)
        for row, i in enumerate(idx):
            ids[row, P - len(prompts[i]) :], attn[row, P - len(prompts[i]) :] = torch.tensor(prompts[i]), 1
        ids, attn = ids.to(device), attn.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # (B, P) positions ignoring the padding
        cache, made = DynamicCache(), []
        for _ in range(new_tokens):
            logits = model(
                input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, logits_to_keep=1
            ).logits
            ids = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            made.append(ids)
            attn = torch.cat([attn, torch.ones_like(ids)], dim=1)
            pos = pos[:, -1:] + 1
        gen = torch.cat(made, dim=1).cpu()  # (B, new_tokens)
        for row, i in enumerate(idx):
            out[i] = gen[row].tolist()
        tick(B)
    return out


def pack(rows: list[list[int]], length: int, pad_id: int) -> TrainingSet:
    """Rows as [N, length] tokens (cut to length) and their mask, right-padded with `pad_id`."""
    tokens = torch.full((len(rows), length), pad_id, dtype=torch.int64)
    mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for n, r in enumerate(rows):
        r = r[:length]
        tokens[n, : len(r)], mask[n, : len(r)] = torch.tensor(r, dtype=torch.int64), True
    return TrainingSet(tokens, mask)


def frequent_ids(data: TrainingSet, size: int, vocab_size: int, keep: tuple[int, ...] = ()) -> torch.Tensor:
    """[size] int64 ascending: the `size` token ids most frequent in the rows (padding excluded), ties to the lower
    id, every id of `keep` (stop tokens) included — SafeAILab's draft vocabulary (EAGLE `traineagle3/cnets.py`:
    most frequent, sorted; `../shared/EAGLE3.md` §1)."""
    if not 1 <= size <= vocab_size:
        raise UserError(
            f"draft_vocab_size {size} is not within the target's vocabulary",
            field="draft_training.draft_vocab_size",
            allowed=f"1..{vocab_size}",
        )
    counts = np.bincount(data.tokens[data.mask].numpy(), minlength=vocab_size)[:vocab_size]
    keep_ids = sorted({int(t) for t in keep if 0 <= int(t) < vocab_size})[:size]
    order = np.lexsort((np.arange(vocab_size), -counts))  # most frequent first, ties to the lower id
    rest = order[~np.isin(order, keep_ids)][: size - len(keep_ids)]
    return torch.from_numpy(np.sort(np.concatenate([np.asarray(keep_ids, np.int64), rest.astype(np.int64)])))


def build_training_set(
    run: DraftTraining,
    tokenizer,
    base_dir: Path,
    special: tuple[int | None, int | None, int],  # (bos, eos, pad)
    model=None,
    tick: Callable[[int], None] = lambda n: None,
) -> TrainingSet:
    """The rows of `run` (module docstring); `model` (HF causal LM) writes the responses when generate_responses."""
    bos, eos, pad = special
    if not run.generate_responses:
        need = -1 if run.source == "builtin:stdlib" else run.num_samples * run.seq_len
        stream = text_stream(tokenizer, examples(run.source, base_dir, False), bos, eos, need)
        return pack(windows(stream, run.seq_len, run.num_samples), run.seq_len, pad)
    docs = list(examples(run.source, base_dir, True))
    prompts = [p[-run.prompt_tokens :] for p in prompt_ids(run, tokenizer, docs, bos, eos)]
    made = greedy_continuations(model, prompts, run.response_tokens, run.generation_batch, pad, tick)
    return pack([p + r for p, r in zip(prompts, made)], run.seq_len, pad)


def special_ids(target_dir: Path) -> tuple[int | None, int | None, int, tuple[int, ...]]:
    """(bos, eos, pad, stop ids) from the target's generation_config.json / config.json."""
    cfg: dict = {}
    for name in ("config.json", "generation_config.json"):
        p = target_dir / name
        if p.is_file():
            cfg.update({k: v for k, v in json.loads(p.read_text()).items() if v is not None})
    eos = cfg.get("eos_token_id")
    stops = tuple([eos] if isinstance(eos, int) else list(eos or []))
    bos = cfg.get("bos_token_id")
    first_eos = stops[0] if stops else None
    pad = cfg.get("pad_token_id", first_eos if first_eos is not None else 0)
    return bos, first_eos, int(pad), stops
