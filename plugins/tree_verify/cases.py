"""Random `tree_verify` cases and the comparison of a face against the reference (torch only).

Used by the unit tests of every face and by the GPU check. A face must reproduce the reference
exactly, except where the reference itself sits at a near-tie: a row whose rejection-mode outcome
changes when its uniforms or its top_p move by `NEAR_TIE_EPS` may come out either way, because the
faces compute in fp32 and sum in another order than the fp64 reference. Greedy rows (argmax with
lowest-index ties) must match exactly in every face.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from builder.speculative.tree import tree_from_parents
from builder.speculative.verify import VerifyResult, tree_verify
from plugins.tree_verify.contract import TEMPERATURE_EPS, Mode

NEAR_TIE_EPS = 1e-4


@dataclass
class Case:
    """One call's inputs, in contract order (plus the mode)."""

    logits: torch.Tensor  # [B, T, V] fp32 | bf16 | fp16
    tokens: torch.Tensor  # [B, T] int32
    paths: torch.Tensor  # [P, D+1] int32
    mode: Mode
    temperature: torch.Tensor  # [B] fp32
    top_p: torch.Tensor  # [B] fp32
    uniforms: torch.Tensor  # [B, D+1] fp32
    draft_probs: torch.Tensor  # [B, T] fp32

    def inputs(self) -> tuple[torch.Tensor, ...]:
        """The seven input tensors in contract order."""
        return (self.logits, self.tokens, self.paths, self.temperature, self.top_p, self.uniforms, self.draft_probs)

    def reference(self) -> VerifyResult:
        return tree_verify(self.logits, self.tokens, self.paths, self.mode, self.temperature, self.top_p,
                           self.uniforms, self.draft_probs)  # fmt: skip

    def rows(self, start: int, stop: int) -> "Case":
        """The case restricted to batch rows start..stop-1 (same tree)."""
        return dataclasses.replace(self, **{n: getattr(self, n)[start:stop] for n in _PER_ROW})

    def to(self, device: str | torch.device) -> "Case":
        return dataclasses.replace(self, **{n: getattr(self, n).to(device) for n in (*_PER_ROW, "paths")})


_PER_ROW = ("logits", "tokens", "temperature", "top_p", "uniforms", "draft_probs")


def random_parents(num_nodes: int, gen: torch.Generator, reach: int = 3) -> list[int]:
    """A random topological tree: node i's parent is one of the `reach` nodes before it."""
    parents = [-1]
    for i in range(1, num_nodes):
        lo = max(0, i - reach)
        parents.append(int(torch.randint(lo, i, (1,), generator=gen)))
    return parents


def random_case(
    seed: int,
    batch: int,
    num_nodes: int,
    vocab: int,
    mode: Mode,
    dtype: torch.dtype = torch.float32,
    hit_rate: float = 0.6,
    deterministic_draft: bool = True,
    greedy_rows: float = 0.15,
    logits: torch.Tensor | None = None,  # [B, T, V] to use instead of random logits
    parents: list[int] | None = None,  # a given tree (e.g. a Medusa preset) instead of a random one
) -> Case:
    """A random case whose drafts are often right, so that long paths get accepted.

    Greedy: a node's token is the argmax at its parent with probability `hit_rate`. Rejection: it
    is sampled from the parent's softmax with that probability. Otherwise it is uniform over the
    vocabulary, and now and then a copy of an earlier sibling's token (a repeated token).
    """
    gen = torch.Generator().manual_seed(seed)
    parents = random_parents(num_nodes, gen) if parents is None else parents
    paths = tree_from_parents(parents).paths.to(torch.int32)  # [P, D+1]
    parents = _parents_from_paths(paths, num_nodes)
    if logits is None:
        logits = (torch.randn(batch, num_nodes, vocab, generator=gen) * 2.0).to(dtype)  # [B, T, V]
    target = logits.float()
    tokens = torch.randint(0, vocab, (batch, num_nodes), generator=gen)  # [B, T]
    for n in range(1, num_nodes):
        hit = torch.rand(batch, generator=gen) < hit_rate  # [B]
        if mode is Mode.GREEDY:
            guess = target[:, parents[n]].argmax(dim=-1)
        else:
            weights = (target[:, parents[n]] - target[:, parents[n]].amax(-1, keepdim=True)).exp()  # [B, V]
            guess = torch.multinomial(weights, 1, generator=gen)[:, 0]
        tokens[:, n] = torch.where(hit, guess, tokens[:, n])
        siblings = [s for s in range(1, n) if parents[s] == parents[n]]
        if siblings and float(torch.rand(1, generator=gen)) < 0.1:
            tokens[:, n] = tokens[:, siblings[0]]
    temperature = 0.3 + 1.2 * torch.rand(batch, generator=gen)  # [B]
    temperature[torch.rand(batch, generator=gen) < greedy_rows] = 0.0
    choices = torch.tensor([1.0, 1.0, 0.95, 0.8, 0.5])
    top_p = choices[torch.randint(0, len(choices), (batch,), generator=gen)]  # [B]
    uniforms = torch.rand(batch, paths.shape[1], generator=gen)  # [B, D+1]
    if deterministic_draft:
        draft_probs = torch.ones(batch, num_nodes)
    else:
        draft_probs = 0.05 + 0.95 * torch.rand(batch, num_nodes, generator=gen)  # [B, T]
    return Case(logits, tokens.to(torch.int32), paths, mode, temperature, top_p, uniforms, draft_probs)


def _parents_from_paths(paths: torch.Tensor, num_nodes: int) -> list[int]:
    parents = [-1] * num_nodes
    for row in paths.tolist():
        for parent, child in zip(row, row[1:]):
            if child >= 0:
                parents[child] = parent
    return parents


@dataclass
class Comparison:
    rows: int
    near_ties: list[int]  # rows that differ from the reference at a near-tie
    wrong: list[str]  # rows that differ for real, described

    def describe(self) -> str:
        return f"{self.rows} rows, {len(self.near_ties)} near-ties {self.near_ties}, wrong: " + "; ".join(self.wrong)


def compare(case: Case, got: VerifyResult) -> Comparison:
    """Compare a face's result with the reference, row by row, allowing rejection-mode near-ties."""
    ref = case.reference()
    near, wrong = [], []
    for b in range(case.tokens.shape[0]):
        mine = _row(got, b)
        if mine == _row(ref, b):
            continue
        greedy = case.mode is Mode.GREEDY or float(case.temperature[b]) <= TEMPERATURE_EPS
        if not greedy and mine in _perturbed_outcomes(case.rows(b, b + 1)):
            near.append(b)
        else:
            wrong.append(f"row {b}: got {mine}, reference {_row(ref, b)}")
    return Comparison(case.tokens.shape[0], near, wrong)


def _row(res: VerifyResult, b: int) -> tuple[int, int, tuple[int, ...]]:
    return (int(res.accepted_len[b]), int(res.best_path[b]), tuple(res.output_tokens[b].tolist()))


def _perturbed_outcomes(case: Case) -> list[tuple[int, int, tuple[int, ...]]]:
    outcomes = []
    for du, dp in ((NEAR_TIE_EPS, 0.0), (-NEAR_TIE_EPS, 0.0), (0.0, NEAR_TIE_EPS), (0.0, -NEAR_TIE_EPS)):
        moved = dataclasses.replace(
            case,
            uniforms=(case.uniforms + du).clamp(0.0, 1.0 - 2**-24),
            top_p=torch.where(case.top_p < 1, case.top_p + dp, case.top_p),
        )
        outcomes.append(_row(moved.reference(), 0))
    return outcomes
