"""Writing an exported graph: the canonical model, its ONNX Runtime-ready twin, one shared weights file,
a manifest (`export.json`), all staged in a temp folder and renamed into place on success.

Files in `out_dir` for a graph named `stem`:
    {stem}.onnx       canonical (contains trtspec::TreeVerify where the graph verifies; checked with
                      onnx.checker full_check)
    {stem}.ort.onnx   `plugins.tree_verify.onnx_op.decompose` of it (greedy TreeVerify of the `ort` variant:
                      `builder.export.verify.lean_greedy`), lowered to float32 when it is a GPU-form
                      graph (bfloat16 / float16, FP8 caches: `builder.export.lower`), repeated
                      subexpressions merged (the decomposition's ArgMax over the logits is `node_argmax`'s),
                      dead nodes pruned, FP8 weight DequantizeLinear spelled Cast · scale so ORT folds it
                      (`qdq.ort_foldable`) (what ORT loads; its I/O is the contract in float32)
    {stem}.plain.ort.onnx  the greedy `ort` target's twin for plain steps only (`builder.export.verify.plain_twin`:
                      no If, no attention bias; what ORT loads for method none)
    {stem}.data       the weights (tensors over 1 KiB), shared by all models
    export.json       inputs, outputs, node counts, settings
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import onnx

from builder.export.graph import DataSink, NodeCounts, dedupe, node_counts, prune, save, save_sharing_data, staged_dir
from builder.export.lower import lower
from builder.export.nbits import BLOCK, quantize_matmuls
from builder.export.qdq import ort_foldable
from builder.export.verify import lean_greedy, plain_twin
from plugins.tree_verify import onnx_op

MANIFEST = "export.json"
NBits = tuple[int, Callable[[str], bool]]  # (bits, which MatMuls by node name): `write_models`


@dataclass(frozen=True)
class ExportResult:
    canonical: Path  # the canonical model (what a TensorRT rewrite reads)
    ort: Path  # the ONNX Runtime-ready model
    data: Path  # external weights shared by both
    manifest: Path  # export.json
    node_counts: dict[str, NodeCounts]  # "canonical" and "ort" (and "plain")
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    plain: Path | None = None  # the plain-steps twin (greedy `ort` target graphs only)


def data_name(stem: str) -> str:
    return f"{stem}.data"


def write_models(
    model: onnx.ModelProto,
    out_dir: Path,
    stem: str,
    settings: dict[str, Any],
    sink: DataSink | None = None,
    nbits: NBits | None = None,
) -> ExportResult:
    """Check and write `model` and its ORT twin to `out_dir` (replaced as a whole; see module doc).
    `sink`: the `DataSink` the graph's weights were streamed to (its location must be `data_name(stem)`).
    `nbits`: (bits, which MatMuls by node name) of the ORT twin's weights to block-quantize (`builder.export.nbits`;
    the canonical graph keeps its float weights); the manifest's "nbits" says how many were."""
    out_dir = Path(out_dir)
    onnx_op.register_schema()
    names = {"canonical": f"{stem}.onnx", "ort": f"{stem}.ort.onnx", "data": data_name(stem)}
    with staged_dir(out_dir) as tmp:
        if sink is not None:
            if sink.location != names["data"]:
                raise ValueError(f"the weights were streamed to {sink.location!r}, not {names['data']!r}")
            sink.close()
            os.replace(sink.path, tmp / names["data"])
        save(model, tmp / names["canonical"], names["data"])  # `model` now refers to the data file
        check(tmp / names["canonical"])
        lean = settings.get("variant") == "ort"
        ort_model = ort_twin(model, lean=lean)
        if nbits is not None:  # (a copy: the twin may share its protos with `model`)
            ort_model, twin = onnx.ModelProto(), ort_model
            ort_model.CopyFrom(twin)
            settings = {
                **settings,
                "nbits": {
                    "bits": nbits[0],
                    "block": BLOCK,
                    "matmuls": quantize_matmuls(ort_model, nbits[0], tmp, nbits[1]),
                },
            }
        save_sharing_data(ort_model, tmp / names["ort"])
        counts = {"canonical": node_counts(model), "ort": node_counts(ort_model)}
        if lean and stem == "target" and settings.get("mode") == "greedy":
            names["plain"] = f"{stem}.plain.ort.onnx"
            plain = plain_twin(ort_model)
            save_sharing_data(plain, tmp / names["plain"])
            counts["plain"] = node_counts(plain)
        inputs = tuple(i.name for i in model.graph.input)
        outputs = tuple(o.name for o in model.graph.output)
        manifest = {
            **settings,
            "files": names,
            "inputs": list(inputs),
            "outputs": list(outputs),
            "node_counts": {k: v.as_dict() for k, v in counts.items()},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return ExportResult(
        out_dir / names["canonical"],
        out_dir / names["ort"],
        out_dir / names["data"],
        out_dir / MANIFEST,
        counts,
        inputs,
        outputs,
        out_dir / names["plain"] if "plain" in names else None,
    )


def ort_twin(model: onnx.ModelProto, lean: bool = False) -> onnx.ModelProto:
    """What ONNX Runtime loads for `model` (see the module docstring); `lean` (the `ort` variant): greedy
    TreeVerify nodes become `builder.export.verify.lean_greedy`'s nodes, not the general decomposition."""
    return ort_foldable(prune(dedupe(lower(onnx_op.decompose(lean_greedy(model) if lean else model)))))


def check(path: Path) -> None:
    """onnx.checker with full shape inference (com.microsoft contrib nodes have no schema in onnx: the
    checker passes over them, and ONNX Runtime's session load checks them)."""
    onnx.checker.check_model(str(path), full_check=True)
