"""Random `tree_verify` cases and the comparison of a face against the reference (torch only).

Used by the unit tests of every face and by the GPU check. Each sequence of a random case has its
own random tree (its own node count, padded to the common T, P and D+1 with nodes on no path, rows
[0, -1, ...] and -1 columns; its node labels sometimes shuffled, so a parent may come after its
child), unless a tree is given: then the batch shares it through a stride-0 expanded tensor.

A face must reproduce the reference exactly, except where the reference itself sits at a near-tie:
a row whose rejection-mode outcome changes when its uniforms or its top_p move by `NEAR_TIE_EPS`
may come out either way, because the faces compute in fp32 and sum in another order than the fp64
reference. Greedy rows (argmax with lowest-index ties) must match exactly in every face.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from builder.speculative.tree import tree_from_parents
from plugins.tree_verify.contract import TEMPERATURE_EPS, Mode
from plugins.tree_verify.reference import VerifyResult, tree_verify

NEAR_TIE_EPS = 1e-4


@dataclass
class Case:
    """One call's inputs, in contract order (plus the mode)."""

    logits: torch.Tensor  # [B, T, V] fp32 | bf16 | fp16
    tokens: torch.Tensor  # [B, T] int32
    paths: torch.Tensor  # [B, P, D+1] int32; one tree per sequence
    mode: Mode
    temperature: torch.Tensor  # [B] fp32
    top_p: torch.Tensor  # [B] fp32
    uniforms: torch.Tensor  # [B, D+1] fp32
    draft_probs: torch.Tensor  # [B, T] fp32

    def inputs(self) -> tuple[torch.Tensor, ...]:
        """The seven input tensors in contract order."""
        return (self.logits, self.tokens, self.paths, self.temperature, self.top_p, self.uniforms, self.draft_probs)

    def reference(self) -> VerifyResult:
        return tree_verify(
            self.logits,
            self.tokens,
            self.paths,
            self.mode,
            self.temperature,
            self.top_p,
            self.uniforms,
            self.draft_probs,
        )

    def rows(self, start: int, stop: int) -> "Case":
        """The case restricted to batch rows start..stop-1 (their trees)."""
        return dataclasses.replace(self, **{n: getattr(self, n)[start:stop] for n in _PER_ROW})

    def to(self, device: str | torch.device) -> "Case":
        """On `device`; a shared (stride-0) tree stays shared."""
        moved = {n: getattr(self, n).to(device) for n in _PER_ROW}
        if self.paths.shape[0] > 1 and self.paths.stride(0) == 0:
            moved["paths"] = self.paths[:1].to(device).expand_as(self.paths)
        return dataclasses.replace(self, **moved)


_PER_ROW = ("logits", "tokens", "paths", "temperature", "top_p", "uniforms", "draft_probs")


def random_parents(num_nodes: int, gen: torch.Generator, reach: int = 3) -> list[int]:
    """A random topological tree: node i's parent is one of the `reach` nodes before it."""
    parents = [-1]
    for i in range(1, num_nodes):
        lo = max(0, i - reach)
        parents.append(int(torch.randint(lo, i, (1,), generator=gen)))
    return parents


def random_trees(batch: int, num_nodes: int, gen: torch.Generator) -> list[list[int]]:
    """One parent list per sequence, each padded to num_nodes with -2 (a node on no path).

    Row 0 uses all num_nodes; the others a random count in 1..num_nodes (1: the root alone). Half
    the rows get their node labels 1.. shuffled, so node order is not always topological."""
    trees = []
    for b in range(batch):
        used = num_nodes if b == 0 else int(torch.randint(1, num_nodes + 1, (1,), generator=gen))
        parents = random_parents(used, gen) + [-2] * (num_nodes - used)
        if used > 2 and float(torch.rand(1, generator=gen)) < 0.5:
            label = [0] + (1 + torch.randperm(used - 1, generator=gen)).tolist() + list(range(used, num_nodes))
            shuffled = [-2] * num_nodes
            for n, parent in enumerate(parents[:used]):
                shuffled[label[n]] = -1 if parent < 0 else label[parent]
            parents = shuffled
        trees.append(parents)
    return trees


def paths_of(trees: list[list[int]], gen: torch.Generator | None = None) -> torch.Tensor:
    """[B, P, D+1] int32 from one parent list per sequence (-1 root, -2 on no path): each tree's leaf
    paths, padded to the common P with rows [0, -1, ...] (with `gen`, also one extra padding row
    at a random position now and then) and to the common D+1 with -1."""
    per_row = []
    for parents in trees:
        used = [n for n, parent in enumerate(parents) if parent != -2]
        order = sorted(used, key=lambda n: _depth(parents, n))  # topological relabelling for tree_from_parents
        new = {n: i for i, n in enumerate(order)}
        leaf_paths = np.asarray(tree_from_parents([new.get(parents[n], -1) for n in order]).paths)  # [P_b, D_b+1]
        rows = [[order[i] if i >= 0 else -1 for i in row] for row in leaf_paths.tolist()]
        if gen is not None and float(torch.rand(1, generator=gen)) < 0.3:
            rows.insert(int(torch.randint(0, len(rows) + 1, (1,), generator=gen)), [0])
        per_row.append(rows)
    num_paths = max(len(rows) for rows in per_row)
    width = max(len(row) for rows in per_row for row in rows)
    out = torch.full((len(trees), num_paths, width), -1, dtype=torch.int32)
    out[:, :, 0] = 0
    for b, rows in enumerate(per_row):
        for p, row in enumerate(rows):
            out[b, p, : len(row)] = torch.tensor(row, dtype=torch.int32)
    return out


def _depth(parents: list[int], node: int) -> int:
    depth = 0
    while parents[node] >= 0:
        node, depth = parents[node], depth + 1
    return depth


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
    parents: list[int] | None = None,  # one tree for the whole batch (e.g. a Medusa preset)
    trees: list[list[int]] | None = None,  # one parent list per sequence (-2: a node on no path)
) -> Case:
    """A random case whose drafts are often right, so that long paths get accepted.

    Greedy: a node's token is the argmax at its parent with probability `hit_rate`. Rejection: it
    is sampled from the parent's softmax with that probability. Otherwise it is uniform over the
    vocabulary, and now and then a copy of an earlier sibling's token (a repeated token). Nodes on
    no path get token -1 (never read).
    """
    gen = torch.Generator().manual_seed(seed)
    if parents is not None:
        trees = [list(parents)] * batch
        paths = paths_of(trees[:1]).expand(batch, -1, -1)  # [B, P, D+1] shared: batch stride 0
    else:
        trees = random_trees(batch, num_nodes, gen) if trees is None else trees
        paths = paths_of(trees, gen)  # [B, P, D+1]
    if logits is None:
        logits = (torch.randn(batch, num_nodes, vocab, generator=gen) * 2.0).to(dtype)  # [B, T, V]
    tokens = torch.stack([_draft_tokens(logits[b].float(), trees[b], mode, hit_rate, gen) for b in range(batch)])
    temperature = 0.3 + 1.2 * torch.rand(batch, generator=gen)  # [B]
    temperature[torch.rand(batch, generator=gen) < greedy_rows] = 0.0
    choices = torch.tensor([1.0, 1.0, 0.95, 0.8, 0.5])
    top_p = choices[torch.randint(0, len(choices), (batch,), generator=gen)]  # [B]
    uniforms = torch.rand(batch, paths.shape[2], generator=gen)  # [B, D+1]
    if deterministic_draft:
        draft_probs = torch.ones(batch, num_nodes)
    else:
        draft_probs = 0.05 + 0.95 * torch.rand(batch, num_nodes, generator=gen)  # [B, T]
    return Case(logits, tokens.to(torch.int32), paths, mode, temperature, top_p, uniforms, draft_probs)


def _draft_tokens(
    target: torch.Tensor, parents: list[int], mode: Mode, hit_rate: float, gen: torch.Generator
) -> torch.Tensor:
    # target [T, V] -> tokens [T] int64 for one sequence's tree (-1 on nodes on no path)
    tokens = torch.randint(0, target.shape[1], (len(parents),), generator=gen)  # [T]
    for n, parent in enumerate(parents):
        if parent < 0:
            tokens[n] = tokens[n] if parent == -1 else -1
            continue
        if float(torch.rand(1, generator=gen)) < hit_rate:
            if mode is Mode.GREEDY:
                tokens[n] = target[parent].argmax()
            else:
                weights = (target[parent] - target[parent].max()).exp()  # [V]
                tokens[n] = torch.multinomial(weights, 1, generator=gen)[0]
        siblings = [s for s in range(n) if parents[s] == parent]
        if siblings and float(torch.rand(1, generator=gen)) < 0.1:
            tokens[n] = tokens[siblings[0]]
    return tokens


def edge_case(mode: Mode, dtype: torch.dtype = torch.float32) -> Case:
    """A hand-made batch of 5 sequences with different trees (T = 6, V = 8, P = 3, D+1 = 3):

    row 0  tree [[0,1,3],[0,1,4],[0,2,5]]; greedy accepts path 2 to its leaf: (3, 2, [3, 6, 1])
    row 1  the root alone, all rows [0,-1,-1] (T = 1 padded; tokens -1): (1, 0, [7, -1, -1])
    row 2  [[0,-1,-1],[0,4,2],[0,3,-1]]: a padding row first, node 2's parent is node 4 (not
           topological), nodes 1 and 5 on no path, node 3 repeats node 4's token: (3, 1, [5, 0, 2])
    row 3  [[0,1,3],[0,2,4],[0,-1,-1]]: argmax ties at every node (lowest id wins), siblings 1 and
           2 draft the same token, both paths accepted to the leaf (lowest index wins): (3, 0, [2, 4, 0])
    row 4  row 0's tree, every draft rejected (in rejection mode too: its drafts have logit −30):
           (1, 0, [3, -1, -1])
    The tuples are the greedy outcomes (accepted_len, best_path, output_tokens). In rejection mode
    row 2 is verified greedily (temperature 0), the others sample with fixed uniforms.
    """
    paths = torch.tensor(
        [
            [[0, 1, 3], [0, 1, 4], [0, 2, 5]],
            [[0, -1, -1], [0, -1, -1], [0, -1, -1]],
            [[0, -1, -1], [0, 4, 2], [0, 3, -1]],
            [[0, 1, 3], [0, 2, 4], [0, -1, -1]],
            [[0, 1, 3], [0, 1, 4], [0, 2, 5]],
        ],
        dtype=torch.int32,
    )
    tokens = torch.tensor(
        [
            [9, 4, 3, 2, 2, 6],
            [9, -1, -1, -1, -1, -1],
            [9, -1, 0, 5, 5, -1],
            [9, 2, 2, 4, 1, -1],
            [9, 0, 1, 5, 5, 5],
        ],
        dtype=torch.int32,
    )
    logits = torch.zeros(5, 6, 8)  # [B, T, V]
    top = {  # (row, node): the maximal token ids (several: a tie)
        (0, 0): [3],
        (0, 2): [6],
        (0, 5): [1],
        (1, 0): [7],
        (2, 0): [5],
        (2, 4): [0],
        (2, 2): [2],
        (3, 0): [2, 5],
        (3, 1): [4, 6],
        (3, 2): [1, 3],
        (3, 3): [0, 7],
        (3, 4): [2, 3],
        (4, 0): [3],
    }
    for (b, n), ids in top.items():
        logits[b, n, ids] = 2.0
    logits[4, 0, [0, 1]] = -30.0
    return Case(
        logits.to(dtype),
        tokens,
        paths,
        mode,
        temperature=torch.tensor([1.0, 0.7, 0.0, 1.3, 0.9]),
        top_p=torch.tensor([1.0, 0.9, 1.0, 0.8, 1.0]),
        uniforms=torch.tensor(
            [[0.2, 0.5, 0.9], [0.3, 0.1, 0.6], [0.7, 0.7, 0.7], [0.05, 0.95, 0.5], [0.99, 0.01, 0.4]]
        ),
        draft_probs=torch.tensor([[1.0] * 6, [1.0] * 6, [1.0] * 6, [1.0, 0.7, 0.9, 1.0, 1.0, 1.0], [1.0] * 6]),
    )


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
