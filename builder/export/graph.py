"""A small ONNX graph builder (unique names, initializers, I/O), saving with external data, node
counts, dead-node pruning, and the temp-folder-then-rename writer every export uses.

Node names carry a scope prefix ("layer3/…") so node counts per layer are read off the names.
Constants are initializers, not `Constant` nodes: they cost nothing at run time and do not count.

Weights over 1 KiB go straight to an external-data file as they are added when the graph has a
`DataSink` (what the exporters use): the ModelProto then holds only references, never a second copy of
the weights, so exporting costs the model's own memory plus one tensor (the Llama-3-8B-width bench,
`devtools.bench.scale`). Without a sink, `save` moves them out at the end, as onnx does.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builder.files import staged_dir  # noqa: F401  (re-exported: the exporters stage their folders)

F32, I64, I32, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
ELEM = {
    "float32": F32,
    "bfloat16": TensorProto.BFLOAT16,
    "float16": TensorProto.FLOAT16,
    "float8e4m3fn": TensorProto.FLOAT8E4M3FN,
    "int64": I64,
    "int32": I32,
    "bool": BOOL,
}  # dtype name -> ONNX
Dims = Sequence[int | str | None]


EXTERNAL_MIN = 1024  # bytes: larger initializers live in the external-data file


class DataSink:
    """One external-data file written tensor by tensor; `add` returns the TensorProto that refers to it.

    `location` is the file name the model will find beside itself (the sink's `path` is where it is
    written meanwhile: it is moved there when the model is saved). Offsets are aligned (4 KiB for tensors
    of 1 MiB and more, so ONNX Runtime can map them; 64 bytes otherwise)."""

    def __init__(self, path: Path, location: str) -> None:
        self.path, self.location = Path(path), location
        self._fh = open(self.path, "wb")
        self.offset = 0

    def add(self, name: str, array: np.ndarray) -> onnx.TensorProto:
        arr = np.ascontiguousarray(array)
        align = 4096 if arr.nbytes >= 1 << 20 else 64
        pad = -self.offset % align
        self._fh.write(b"\0" * pad)
        self.offset += pad
        self._fh.write(arr.reshape(-1).view(np.uint8).data)  # the array's own bytes, no copy
        t = onnx.TensorProto(name=name, dims=arr.shape, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype))
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", self.offset), ("length", arr.nbytes)):
            t.external_data.add(key=key, value=str(value))
        self.offset += arr.nbytes
        return t

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()


class Graph:
    """Accumulates nodes, initializers, inputs and outputs; `model()` assembles the ModelProto."""

    def __init__(self, name: str, sink: DataSink | None = None) -> None:
        self.name = name
        self.sink = sink
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._used: set[str] = set()
        self._consts: dict[tuple[Any, ...], str] = {}
        self._scope = ""
        self.tags: dict[str, str] = {}  # named values worth finding again (e.g. FP8 Q/DQ sites, `qdq`)

    @contextlib.contextmanager
    def scope(self, prefix: str) -> Iterator[None]:
        """Names created inside get `prefix/` (node counts per layer read this)."""
        before, self._scope = self._scope, f"{self._scope}{prefix}/"
        try:
            yield
        finally:
            self._scope = before

    @property
    def scope_name(self) -> str:
        """The current scope prefix ("layer3/" or "")."""
        return self._scope

    def fresh(self, base: str) -> str:
        """A value/node name not used before, under the current scope."""
        stem = f"{self._scope}{base}"
        name, n = stem, 0
        while name in self._used:
            n += 1
            name = f"{stem}_{n}"
        self._used.add(name)
        return name

    def branch(self) -> "Graph":
        """A Graph for the body of an If: its own nodes and (small) initializers, value names unique together
        with this graph's (a body reads this graph's values by name)."""
        sub = Graph(self.name, None)
        sub._used, sub._scope = self._used, self._scope  # one name registry
        return sub

    def body(self, outputs: Iterable[tuple[str, int, Dims]]) -> onnx.GraphProto:
        """This (branch) graph as an If body whose outputs are (name, element type, dims)."""
        outs = [helper.make_tensor_value_info(name, elem, list(dims)) for name, elem, dims in outputs]
        return helper.make_graph(self.nodes, self.fresh("body"), [], outs, self.initializers)

    def input(self, name: str, elem: int, dims: Dims) -> str:
        self._claim(name)
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(dims)))
        return name

    def output(self, value: str, elem: int, dims: Dims) -> None:
        """Declare `value` (already produced under that exact name) a graph output."""
        self.outputs.append(helper.make_tensor_value_info(value, elem, list(dims)))

    def declare(self, io: str, entries: Iterable[tuple[str, str, list[int | str]]]) -> None:
        """Graph inputs (io="inputs") or outputs from (name, dtype name, dims) triples (`builder.export.contract`)."""
        for name, dtype, dims in entries:
            if io == "inputs":
                self.input(name, ELEM[dtype], dims)
            else:
                self.output(name, ELEM[dtype], dims)

    def weight(self, base: str, array: np.ndarray) -> str:
        """An initializer holding `array` (kept as is: dtype and layout are the caller's)."""
        name = self.fresh(base)
        if self.sink is not None and array.nbytes > EXTERNAL_MIN:
            self.initializers.append(self.sink.add(name, array))
        else:
            self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, value: object, dtype: type = np.int64) -> str:
        """A small constant initializer, shared by every use of the same value."""
        arr: np.ndarray = np.asarray(value, dtype=dtype)
        key = (arr.dtype.name, arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            self._consts[key] = self.weight("const", arr)
        return self._consts[key]

    def op(self, op_type: str, *inputs: str, out: str | None = None, domain: str = "", **attrs: Any) -> str:
        """One node with one output (named `out` if given); returns the output name."""
        return self.op_n(op_type, *inputs, outs=[out or ""], domain=domain, **attrs)[0]

    def op_n(self, op_type: str, *inputs: str, outs: Sequence[str] | int, domain: str = "", **attrs: Any) -> list[str]:
        """One node with several outputs: `outs` is a count or a list of names ("" = a fresh name, "-" = an
        optional output left unproduced); returns the output names."""
        names = [""] * outs if isinstance(outs, int) else list(outs)
        node_name = self.fresh(op_type)
        resolved = []
        for i, n in enumerate(names):
            if n == "-":
                resolved.append("")
            elif n:
                self._claim(n)
                resolved.append(n)
            else:
                resolved.append(node_name if i == 0 else self.fresh(f"{op_type}_out{i}"))
        self.nodes.append(
            helper.make_node(op_type, list(inputs), resolved, name=node_name, domain=domain or None, **attrs)
        )
        return resolved

    def add(self, node: onnx.NodeProto) -> None:
        """Append a node made elsewhere (its output names are claimed here)."""
        for name in node.output:
            if name:
                self._claim(name)
        self.nodes.append(node)

    def model(self, opsets: dict[str, int], doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers, doc_string=doc)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()], producer_name="trtspec"
        )
        model.ir_version = 10  # ONNX Runtime 1.20+ reads IR 10 (opset 24 needs ≥ 10)
        if self.tags:  # tag -> value name, so a reader (a test) can find them again
            helper.set_model_props(model, dict(sorted(self.tags.items())))
        return model

    def _claim(self, name: str) -> None:
        if name in self._used:
            raise ValueError(f"duplicate value name {name!r}")
        self._used.add(name)


@dataclass(frozen=True)
class NodeCounts:
    """ONNX nodes of one graph: in all, per decoder layer (scope "layer{i}/"), and by op type."""

    total: int
    per_layer: tuple[int, ...]
    by_op: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "per_layer": list(self.per_layer), "by_op": dict(self.by_op)}


def node_counts(model: onnx.ModelProto) -> NodeCounts:
    """Count nodes; layer i's nodes are those whose name starts with "layer{i}/"."""
    per_layer: dict[int, int] = {}
    by_op: dict[str, int] = {}
    for node in model.graph.node:
        key = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        by_op[key] = by_op.get(key, 0) + 1
        head = node.name.split("/", 1)[0]
        if head.startswith("layer") and head[5:].isdigit() and "/" in node.name:
            per_layer[int(head[5:])] = per_layer.get(int(head[5:]), 0) + 1
    layers = tuple(per_layer.get(i, 0) for i in range(max(per_layer) + 1)) if per_layer else ()
    return NodeCounts(len(model.graph.node), layers, dict(sorted(by_op.items())))


def _bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The subgraphs of a node (an If's branches, a Loop's body)."""
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every value `node` reads: its inputs and, recursively, the names its subgraphs' nodes read (a body's
    own values among them, harmless here: names are unique in the model)."""
    names = {i for i in node.input if i}
    for body in _bodies(node):
        for inner in body.node:
            names |= _reads(inner)
        names |= {o.name for o in body.output}
    return names


def _rename_reads(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    """Apply `rename` to what `node` and its subgraphs read, in place."""
    for i, name in enumerate(node.input):
        node.input[i] = rename.get(name, name)
    for body in _bodies(node):
        for inner in body.node:
            _rename_reads(inner, rename)
        for o in body.output:
            if o.name in rename:  # a body may hand an outer value straight through
                o.name = rename[o.name]


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop nodes (and initializers) that no graph output depends on (through If bodies too); in place,
    returns `model`."""
    g = model.graph
    needed = {o.name for o in g.output}
    keep: list[onnx.NodeProto] = []
    for node in reversed(g.node):
        if any(o and o in needed for o in node.output):
            keep.append(node)
            needed.update(_reads(node))
    del g.node[:]
    g.node.extend(reversed(keep))
    inits = [t for t in g.initializer if t.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)
    return model


def dedupe(model: onnx.ModelProto) -> onnx.ModelProto:
    """Common-subexpression elimination, in place: a node with the same op, inputs and attributes as an
    earlier one is dropped and its outputs' uses (inside If bodies too) read the earlier node's. (ORT's own
    pass leaves nodes that feed graph outputs alone; this one keeps the graph-output producer when it comes
    first.) Run `prune` afterwards for what becomes dead."""
    g = model.graph
    outputs = {o.name for o in g.output}
    seen: dict[tuple[Any, ...], list[str]] = {}
    rename: dict[str, str] = {}
    keep: list[onnx.NodeProto] = []
    for node in g.node:
        _rename_reads(node, rename)
        key = (node.domain, node.op_type, tuple(node.input), tuple(a.SerializeToString() for a in node.attribute))
        first = seen.get(key)
        if first is None or any(o in outputs for o in node.output) or len(first) != len(node.output):
            seen.setdefault(key, list(node.output))
            keep.append(node)
            continue
        rename.update({o: f for o, f in zip(node.output, first) if o})
    del g.node[:]
    g.node.extend(keep)
    return model


def save(model: onnx.ModelProto, path: Path, data_file: str) -> None:
    """Write `model` to `path`, tensors over 1 KiB to `data_file` beside it (converts `model` in place:
    afterwards its large initializers refer to that file). Tensors already external (a `DataSink`'s,
    its file moved to `data_file` first) are left as they are; others are appended to the file."""
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data_file,
        size_threshold=EXTERNAL_MIN,
    )


def save_sharing_data(model: onnx.ModelProto, path: Path) -> None:
    """Write a model whose large initializers already refer to an external file (see `save`) in the
    same folder: only the graph is written, the data file is shared."""
    onnx.save_model(model, str(path), save_as_external_data=False)


@contextlib.contextmanager
def data_sink(out_dir: Path, location: str) -> Iterator[DataSink]:
    """A `DataSink` writing to a temp file beside `out_dir` (removed on exit unless moved away)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out_dir.name}.", suffix=f".{location}", dir=out_dir.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it private)
    sink = DataSink(Path(tmp), location)
    try:
        yield sink
    finally:
        sink.close()
        Path(tmp).unlink(missing_ok=True)
