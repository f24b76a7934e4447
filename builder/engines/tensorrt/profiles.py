"""Optimization profiles of the TensorRT engines, and which profile a call runs under (pure Python).

A TensorRT engine with dynamic shapes is built for ranges of input shapes, one range per input per
profile (min, opt, max). Each graph gets two:

* `prefill` — a prompt: rows B in 1..max_batch_size, T in 1..max_input_len new tokens; for the target
  one verify node (Tv = 1) and a one-node tree (P = W = 1); for the EAGLE draft F = U in 1..max_input_len;
* `step` — a draft tree: T (= Tv) in 1..max_nodes, P and W in 1..max_nodes (a tree of T nodes has at
  most T paths of at most T nodes); for the EAGLE draft F and U up to max(max_nodes, tentative + 1).

Caches are [B, KV, CAP, D] with CAP fixed. opt = max except the prefill length (min(max_input_len,
256): prompts are usually shorter than the limit). The inputs and their dims are the graph I/O contract's
(`builder.export.contract`): a profile is a (min, opt, max) range per dynamic dim. `pick` returns the first
profile whose ranges hold a call's shapes, preferring `step`; a call no profile holds is refused with the
limits it exceeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from builder.export.contract import EAGLE, TARGET, profile_shapes

Dims = tuple[int, ...]
PREFILL_OPT = 256


@dataclass(frozen=True)
class Profile:
    name: str
    shapes: Mapping[str, tuple[Dims, Dims, Dims]]  # input -> (min, opt, max)

    def holds(self, shapes: Mapping[str, Sequence[int]]) -> bool:
        return all(name in self.shapes and _within(tuple(shape), *self.shapes[name]) for name, shape in shapes.items())

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shapes": {k: [list(d) for d in v] for k, v in self.shapes.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Profile":
        shapes = {k: (tuple(v[0]), tuple(v[1]), tuple(v[2])) for k, v in data["shapes"].items()}
        return cls(str(data["name"]), shapes)


def _within(shape: Dims, lo: Dims, _opt: Dims, hi: Dims) -> bool:
    return len(shape) == len(lo) and all(a <= s <= b for s, a, b in zip(shape, lo, hi))


def _ranges(b: int, **dims: tuple[int, int, int]) -> dict[str, tuple[int, int, int]]:
    return {"B": (1, b, b), **dims}


@dataclass(frozen=True)
class CacheDims:
    layers: int
    kv_heads: int
    capacity: int  # CAP of this graph's caches
    head_dim: int

    def fixed(self, **more: int) -> dict[str, int]:
        return {"KV": self.kv_heads, "CAP": self.capacity, "D": self.head_dim, **more}


def target_profiles(
    *, max_batch_size: int, max_input_len: int, max_nodes: int, cache: CacheDims, rejection: bool
) -> list[Profile]:
    """The target step graph's profiles (greedy graph; `rejection` adds the sampling inputs): every input of
    the graph's I/O contract (`builder.export.contract.TARGET`), shaped from ranges of its dims."""
    b, opt = max_batch_size, min(max_input_len, PREFILL_OPT)
    step = _ranges(
        b,
        T=(1, max_nodes, max_nodes),
        Tv=(1, max_nodes, max_nodes),
        P=(1, max_nodes, max_nodes),
        W=(1, max_nodes, max_nodes),
    )
    prefill = _ranges(b, T=(1, opt, max_input_len), Tv=(1, 1, 1), P=(1, 1, 1), W=(1, 1, 1))
    return [
        Profile(name, profile_shapes(TARGET, ranges, cache.fixed(), layers=cache.layers, rejection=rejection))
        for name, ranges in (("step", step), ("prefill", prefill))
    ]


def eagle_profiles(
    *, max_batch_size: int, max_input_len: int, max_rows: int, hidden_size: int, cache: CacheDims
) -> list[Profile]:
    """The EAGLE draft graph's profiles (`builder.export.contract.EAGLE`); `max_rows` bounds F and U of a
    step (see the module docstring)."""
    b, opt = max_batch_size, min(max_input_len, PREFILL_OPT)
    step = _ranges(b, F=(1, max_rows, max_rows), U=(1, max_rows, max_rows))
    prefill = _ranges(b, F=(1, opt, max_input_len), U=(1, opt, max_input_len))
    return [
        Profile(name, profile_shapes(EAGLE, ranges, cache.fixed(C=hidden_size), layers=cache.layers))
        for name, ranges in (("step", step), ("prefill", prefill))
    ]


def pick(profiles: Sequence[Profile], shapes: Mapping[str, Sequence[int]]) -> int:
    """Index of the profile to run `shapes` under (the first that holds them, in the order given)."""
    for i, profile in enumerate(profiles):
        if profile.holds(shapes):
            return i
    limits = "; ".join(
        f"{p.name}: "
        + ", ".join(
            f"{n} {list(shapes[n])} not in {list(lo)}..{list(hi)}"
            for n, (lo, _o, hi) in p.shapes.items()
            if n in shapes and not _within(tuple(shapes[n]), lo, _o, hi)
        )
        for p in profiles
    )
    raise ValueError(f"no optimization profile of this engine takes these shapes ({limits})")
