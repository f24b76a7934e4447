"""The `tree_verify` contract: one spec read by every face (torch reference, Triton kernel, ONNX op +
ORT decomposition, TensorRT plugin) and by the exporter. Pure Python, no torch/onnx/tensorrt import.

Words as in the glossary (`builder.speculative`): a step's *tree* of T *nodes* (node 0 = root), *paths*,
*accepted* nodes, the *bonus token*.

Inputs (all required, in this order, for the ONNX node and the TensorRT plugin; the torch
reference makes the sampling inputs optional in greedy mode):

    logits       [B, T, V]  fp32 | bf16 | fp16   target logits, one row per node (faces compute in
                                    fp32, the reference in fp64)
    tokens       [B, T]     int32   node tokens; only those of nodes on a path, root excepted, are
                                    read (they must lie in [0, V)); padding nodes may hold anything
    paths        [B, P, D+1] int32  one tree per sequence: root-to-leaf node chains, root first
                                    (paths[b, :, 0] == 0), -1 padded at the tail. Within a sequence
                                    every node has one parent (it sits at the same depth in every
                                    path). Trees of different sizes are padded to a common T (nodes
                                    on no path are ignored), P (rows [0, -1, ...]) and D+1 (-1).
                                    Callers with one shared tree pass paths[None].expand(B, -1, -1).
    temperature  [B]        fp32    rejection mode; ≤ TEMPERATURE_EPS verifies that row greedily
    top_p        [B]        fp32    rejection mode; in (0, 1]; ≥ 1 keeps the whole vocabulary
    uniforms     [B, D+1]   fp32    rejection mode; in [0, 1); uniforms[b, k] is used at the node of
                                    depth k on the accepted chain (the caller's randomness, so a
                                    call is reproducible)
    draft_probs  [B, T]     fp32    rejection mode; q(node token) in (0, 1] under the drafter at the
                                    node's parent; 1 for deterministic (top-k / n-gram) drafters

Attribute: mode (int) — Mode.GREEDY = 0, Mode.REJECTION = 1.

Outputs:

    accepted_len   [B]       int32  tokens emitted = accepted draft tokens + 1 (bonus), in 1..D+1;
                                    paths[b, best_path[b], :accepted_len[b]] are the nodes to commit
    best_path      [B]       int32  the lowest path index whose first accepted_len nodes are the
                                    accepted chain
    output_tokens  [B, D+1]  int32  the accepted draft tokens (depth order), then the bonus token,
                                    then -1

Greedy: g[n] = argmax of logits[b, n] (ties: lowest token id). A path's accepted length is the
longest prefix whose nodes' tokens equal g at their parent; the longest over all paths wins (ties:
lowest path index); the bonus token is g at the last accepted node. Everything is per sequence:
row b uses paths[b] only.

Rejection (temperature > TEMPERATURE_EPS): p_n = softmax(logits[b, n] / temperature), restricted
to the top-p nucleus and renormalised. Nucleus: token i is kept iff the probability mass of tokens
strictly more probable than i is < top_p (closed under ties; the most probable token is always
kept). From the root, at the current node n of depth k with t = uniforms[b, k]: for each child c
of n in node order, a = p_n(tok c) / q(c) with p_n the current residual (a token already removed
by an earlier sibling has p_n = 0): accept c if t < a; else t -= a and remove tok c from p_n (no
renormalisation: t is kept in probability-mass units). If a child is accepted, it becomes the
current node; if none is (or n is a leaf), the bonus token is the first token, in token-id order,
whose cumulative residual mass exceeds t. Rounding fallbacks (unreachable in exact arithmetic):
no such token → the last token with residual mass > 0; an empty residual → g[n].
`plugins.tree_verify.reference` holds the reference and the proof that the output follows the target.

Edge cases: T = 1 (paths [[[0]]]) emits one token, the greedy / sampled token at the root; so does
a sequence whose paths are all padding rows [0, -1, ...]. All draft tokens rejected → accepted_len
1, best_path 0, output_tokens [bonus, -1, ...]. Paths that repeat a prefix (or the same path) are
allowed.

Untrusted index inputs. TensorRT runs a plugin on made-up inputs while it times tactics, and an engine
computes on whatever its caller bound: the kernel (hence the TensorRT plugin) never addresses memory by an
input value it has not range-checked, so no input can fault. Index values outside the rules above read as:
  * paths[b, p, 0] is the root 0, whatever it holds;
  * at depth k ≥ 1 the first entry outside [1, T) ends its row: it and every entry after it read as -1
    (`sanitize_paths`);
  * a node whose token lies outside [0, V) is never accepted and never emitted: in greedy mode it equals no
    argmax; in rejection mode its target probability is 0 (a = 0: t is unchanged, nothing leaves p_n);
  * rows that disagree on a node's parent are each followed on their own: in greedy mode each path along
    its own prefix; in rejection mode the children of the current node are the next entries of the rows
    whose prefix is the accepted chain (with one parent per node, exactly the node's children).
`reference.tree_verify(..., untrusted=True)` computes the same (by default it raises on such inputs). For
any inputs at all — floats too (NaN, ±inf, out-of-range temperature, top_p, uniforms, draft_probs), where
the numbers are then unspecified — the outputs stay in bounds: accepted_len in 1..D+1, best_path in
[0, P), output_tokens in [0, V) for the first accepted_len slots and -1 after, and paths[b, best_path[b],
1:accepted_len[b]] are in-range nodes (the accepted chain after the root). The ONNX decomposition
(`onnx_op.decompose`, ONNX Runtime) does not take this reading: ORT checks its Gather indices and fails
the call instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Sequence

DOMAIN = "trtspec"  # ONNX domain of the custom op and TensorRT plugin namespace
OP_TYPE = "TreeVerify"  # ONNX op type == TensorRT plugin name
PLUGIN_ID = f"{DOMAIN}::{OP_TYPE}"
OP_VERSION = 1  # ONNX opset version of the `trtspec` domain; TensorRT plugin_version "1"
TEMPERATURE_EPS = 1e-5  # temperature ≤ this: the row is verified greedily


class Mode(enum.IntEnum):
    GREEDY = 0
    REJECTION = 1

    @classmethod
    def parse(cls, mode: "Mode | int | str") -> "Mode":
        if isinstance(mode, str):
            try:
                return cls[mode.upper()]
            except KeyError:
                raise ValueError(f"mode {mode!r}: expected one of {[m.name.lower() for m in cls]}") from None
        return cls(int(mode))


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dims: tuple[str, ...]  # symbolic dims; "D+1" is the paths width
    dtypes: tuple[str, ...]  # numpy/torch dtype names
    doc: str


FLOAT_LOGITS = ("float32", "bfloat16", "float16")

INPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("logits", ("B", "T", "V"), FLOAT_LOGITS, "target logits per node"),
    TensorSpec("tokens", ("B", "T"), ("int32",), "node tokens; node 0 = root"),
    TensorSpec("paths", ("B", "P", "D+1"), ("int32",), "per sequence: root-first node chains, -1 padded"),
    TensorSpec("temperature", ("B",), ("float32",), "sampling temperature; ≤ 1e-5 = greedy"),
    TensorSpec("top_p", ("B",), ("float32",), "nucleus mass in (0, 1]"),
    TensorSpec("uniforms", ("B", "D+1"), ("float32",), "U[0, 1) per depth"),
    TensorSpec("draft_probs", ("B", "T"), ("float32",), "q(node token) at its parent; 1 = deterministic"),
)
OUTPUTS: tuple[TensorSpec, ...] = (
    TensorSpec("accepted_len", ("B",), ("int32",), "emitted tokens incl. bonus, ≥ 1"),
    TensorSpec("best_path", ("B",), ("int32",), "lowest path index holding the accepted chain"),
    TensorSpec("output_tokens", ("B", "D+1"), ("int32",), "accepted tokens, bonus, -1 padding"),
)
INPUT_NAMES = tuple(s.name for s in INPUTS)
OUTPUT_NAMES = tuple(s.name for s in OUTPUTS)


def bind_dims(shapes: Mapping[str, Sequence[int]], names: Sequence[str] = INPUT_NAMES) -> dict[str, int]:
    """Check the given tensors' shapes against the contract; return {"B", "T", "V", "P", "D+1"}.

    Raises ValueError naming the tensor, its shape and the conflicting dimension.
    """
    specs = {s.name: s for s in INPUTS + OUTPUTS}
    dims: dict[str, int] = {}
    for name in names:
        spec, shape = specs[name], tuple(int(d) for d in shapes[name])
        if len(shape) != len(spec.dims):
            raise ValueError(f"{name}: shape {list(shape)} has rank {len(shape)}, expected {list(spec.dims)}")
        for sym, size in zip(spec.dims, shape):
            if dims.setdefault(sym, size) != size:
                raise ValueError(f"{name}: shape {list(shape)} has {sym} = {size}, but {sym} = {dims[sym]} elsewhere")
    if dims.get("T", 1) < 1 or dims.get("D+1", 1) < 1 or dims.get("P", 1) < 1:
        raise ValueError(f"empty tree: {dims}")
    return dims


def check_dtypes(dtypes: Mapping[str, str]) -> None:
    """dtypes: tensor name → dtype name ("float32", "int32", …). Raises ValueError on a mismatch."""
    specs = {s.name: s for s in INPUTS + OUTPUTS}
    for name, dtype in dtypes.items():
        if dtype not in specs[name].dtypes:
            raise ValueError(f"{name}: dtype {dtype}, expected one of {list(specs[name].dtypes)}")


def sanitize_paths(paths: Sequence[Sequence[Sequence[int]]], num_nodes: int) -> list[list[list[int]]]:
    """paths [B][P][D+1] as every face reads untrusted input (module docstring): column 0 is the root 0; at
    depth ≥ 1 the first entry outside [1, num_nodes) and everything after it become -1."""
    out = []
    for tree in paths:
        rows = []
        for path in tree:
            row = [0] + [-1] * (len(path) - 1)
            for k in range(1, len(path)):
                if not 1 <= path[k] < num_nodes:
                    break
                row[k] = int(path[k])
            rows.append(row)
        out.append(rows)
    return out


def check_paths(paths: Sequence[Sequence[Sequence[int]]], num_nodes: int) -> None:
    """Validate each sequence's tree, paths [B][P][D+1] (node indices). Raises ValueError precisely.

    Row rules: starts with the root 0; -1 padding is a suffix; nodes in 1..T-1 (node 0 only first);
    within a sequence each node has one parent. A padding row [0, -1, ...] is valid.
    """
    for b, tree in enumerate(paths):
        parent: dict[int, int] = {}
        for row, path in enumerate(tree):
            where = f"paths[{b}][{row}] = {list(path)}"
            if not path or path[0] != 0:
                raise ValueError(f"{where}: must start with the root node 0")
            width = next((k for k, n in enumerate(path) if n < 0), len(path))
            if any(n >= 0 for n in path[width:]):
                raise ValueError(f"{where}: -1 padding must be a suffix")
            for k in range(1, width):
                node = path[k]
                if node >= num_nodes or node == 0:
                    raise ValueError(f"{where}: node {node} at depth {k} out of range 1..{num_nodes - 1}")
                if parent.setdefault(node, path[k - 1]) != path[k - 1]:
                    raise ValueError(f"paths[{b}]: node {node} has two parents ({parent[node]} and {path[k - 1]})")
