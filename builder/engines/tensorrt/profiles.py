"""Optimization profiles of the TensorRT engines, and which profile a call runs under (pure Python).

A TensorRT engine with dynamic shapes is built for ranges of input shapes, one range per input per
profile (min, opt, max). Each graph gets two:

* `prefill` — a prompt: rows B in 1..max_batch_size, T in 1..max_input_len new tokens; for the target
  one verify node (Tv = 1) and a one-node tree (P = W = 1); for the EAGLE draft F = U in 1..max_input_len;
* `step` — a draft tree: T (= Tv) in 1..max_nodes, P and W in 1..max_nodes (a tree of T nodes has at
  most T paths of at most T nodes); for the EAGLE draft F and U up to max(max_nodes, tentative + 1).

Caches are [B, KV, CAP, D] with CAP fixed. opt = max except the prefill length (min(max_input_len,
256): prompts are usually shorter than the limit). `pick` returns the first profile whose ranges hold a
call's shapes, preferring `step`; a call no profile holds is refused with the limits it exceeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

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


def _range(lo: Sequence[int], opt: Sequence[int], hi: Sequence[int]) -> tuple[Dims, Dims, Dims]:
    return tuple(lo), tuple(opt), tuple(hi)


def _caches(layers: int, batch: int, kv_heads: int, capacity: int, head_dim: int) -> dict[str, tuple[Dims, Dims, Dims]]:
    one = _range((1, kv_heads, capacity, head_dim), (batch, kv_heads, capacity, head_dim),
                 (batch, kv_heads, capacity, head_dim))  # fmt: skip
    return {f"past_{kind}_{layer}": one for layer in range(layers) for kind in ("key", "value")}


@dataclass(frozen=True)
class CacheDims:
    layers: int
    kv_heads: int
    capacity: int  # CAP of this graph's caches
    head_dim: int


def target_profiles(*, max_batch_size: int, max_input_len: int, max_nodes: int, cache: CacheDims,
                    rejection: bool) -> list[Profile]:  # fmt: skip
    """The target step graph's profiles (greedy graph; `rejection` adds the sampling inputs)."""
    b = max_batch_size
    caches = _caches(cache.layers, b, cache.kv_heads, cache.capacity, cache.head_dim)
    out = []
    for name, t_hi, t_opt, tv, pw in (("step", max_nodes, max_nodes, None, max_nodes),
                                      ("prefill", max_input_len, min(max_input_len, PREFILL_OPT), 1, 1)):  # fmt: skip
        tv_lo, tv_opt, tv_hi = (1, t_opt, t_hi) if tv is None else (tv, tv, tv)
        pw_lo = 1
        shapes = {
            "tokens": _range((1, 1), (b, t_opt), (b, t_hi)), "position_ids": _range((1, 1), (b, t_opt), (b, t_hi)),
            "tree_mask": _range((1, 1, 1), (b, t_opt, t_opt), (b, t_hi, t_hi)),
            "past_len": _range((1,), (b,), (b,)), "num_nodes": _range((1,), (b,), (b,)),
            "verify_index": _range((1, tv_lo), (b, tv_opt), (b, tv_hi)),
            "paths": _range((1, pw_lo, pw_lo), (b, pw, pw), (b, pw, pw)),
        }  # fmt: skip
        if rejection:
            shapes |= {"temperature": _range((1,), (b,), (b,)), "top_p": _range((1,), (b,), (b,)),
                       "uniforms": _range((1, pw_lo), (b, pw), (b, pw))}  # fmt: skip
        out.append(Profile(name, {**shapes, **caches}))
    return out


def eagle_profiles(*, max_batch_size: int, max_input_len: int, max_rows: int, hidden_size: int,
                   cache: CacheDims) -> list[Profile]:  # fmt: skip
    """The EAGLE draft graph's profiles; `max_rows` bounds F and U of a step (see the module docstring)."""
    b = max_batch_size
    caches = _caches(cache.layers, b, cache.kv_heads, cache.capacity, cache.head_dim)
    out = []
    for name, hi, opt in (("step", max_rows, max_rows), ("prefill", max_input_len, min(max_input_len, PREFILL_OPT))):
        shapes = {
            "tokens": _range((1, 1), (b, opt), (b, hi)), "hidden_in": _range((1, 1, hidden_size),
            (b, opt, hidden_size), (b, hi, hidden_size)), "position_ids": _range((1, 1), (b, opt), (b, hi)),
            "past_len": _range((1,), (b,), (b,)), "write_offset": _range((1,), (b,), (b,)),
            "num_new": _range((1,), (b,), (b,)), "tree_mask": _range((1, 1, 1), (b, opt, opt), (b, hi, hi)),
        }  # fmt: skip
        out.append(Profile(name, {**shapes, **caches}))
    return out


def pick(profiles: Sequence[Profile], shapes: Mapping[str, Sequence[int]]) -> int:
    """Index of the profile to run `shapes` under (the first that holds them, in the order given)."""
    for i, profile in enumerate(profiles):
        if profile.holds(shapes):
            return i
    limits = "; ".join(f"{p.name}: " + ", ".join(f"{n} {list(shapes[n])} not in {list(lo)}..{list(hi)}"
                                                   for n, (lo, _o, hi) in p.shapes.items()
                                                   if n in shapes and not _within(tuple(shapes[n]), lo, _o, hi))
                       for p in profiles)  # fmt: skip
    raise ValueError(f"no optimization profile of this engine takes these shapes ({limits})")
