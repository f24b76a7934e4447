"""Extract the option names of TensorRT-LLM's `tensorrt_llm/llmapi/llm_args.py` as the table trtspec commits
(`builder/trtllm/llmapi/llm_args_table.py`): per class, its pydantic fields (inherited ones included, private
`_x`, `ClassVar` and `PrivateAttr` left out), each field's aliases (`alias=`, `validation_alias=AliasChoices(…)`)
and the `decoding_type` names `speculative_config` dispatches on (`decoding_types`).

    python devtools/llm_args_table.py LLM_ARGS_PY --source "NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @ C"

LLM_ARGS_PY is a checked-out copy (e.g. `git -C <mirror> show C:tensorrt_llm/llmapi/llm_args.py > llm_args.py`);
the script only parses it (ast), it never imports TensorRT-LLM. It prints the module text; the classes kept are
CLASSES. Standard library only. Older versions (to 1.2.0rc2 at least) declare `decoding_type` as a ClassVar that
DecodingBaseConfig.from_dict dispatches on through its `config_classes` dict (whose keys are the accepted names:
"DraftTarget" there, while the ClassVar says "Draft_Target"); later ones make it a Literal field.
"""

from __future__ import annotations

import argparse
import ast
import pprint
import sys
from pathlib import Path

CLASSES = (
    "BaseLlmArgs",
    "TorchLlmArgs",
    "KvCacheConfig",
    "CudaGraphConfig",
    "DecodingBaseConfig",
    "EagleDecodingConfig",
    "Eagle3DecodingConfig",
    "NGramDecodingConfig",
    "DraftTargetDecodingConfig",
    "MedusaDecodingConfig",
    "LookaheadDecodingConfig",
)


def _is_private_attr(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Call) and getattr(value.func, "id", None) == "PrivateAttr"


def _is_classvar(annotation: ast.expr) -> bool:
    node = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return getattr(node, "id", getattr(node, "attr", None)) == "ClassVar"


def _aliases(value: ast.expr | None) -> list[str]:
    """alias="x" and validation_alias=AliasChoices("a", "b") of a Field(...) call, the field's own name excluded."""
    if not isinstance(value, ast.Call):
        return []
    out: list[str] = []
    for kw in value.keywords:
        if kw.arg == "alias" and isinstance(kw.value, ast.Constant):
            out.append(kw.value.value)
        if kw.arg == "validation_alias" and isinstance(kw.value, ast.Call):
            out += [a.value for a in kw.value.args if isinstance(a, ast.Constant)]
    return out


def _literal(annotation: ast.expr) -> str | None:
    """The value of Literal["X"]."""
    if isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", None) == "Literal":
        sl = annotation.slice
        if isinstance(sl, ast.Constant):
            return sl.value
    return None


def own_fields(cls: ast.ClassDef) -> dict[str, dict]:
    fields: dict[str, dict] = {}
    for stmt in cls.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        if name.startswith("_") or _is_classvar(stmt.annotation) or _is_private_attr(stmt.value):
            continue
        entry: dict = {"aliases": sorted(a for a in _aliases(stmt.value) if a != name)}
        lit = _literal(stmt.annotation)
        if name == "decoding_type" and lit is not None:
            entry["literal"] = lit
        fields[name] = entry
    return fields


def extract(text: str, classes: tuple[str, ...] = CLASSES) -> dict[str, dict]:
    """{class: {"bases": [...], "fields": {name: {"aliases": [...], ("literal": ...)}}}} with inherited fields."""
    tree = ast.parse(text)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def fields_of(name: str) -> dict[str, dict]:
        node = defs[name]
        merged: dict[str, dict] = {}
        for base in node.bases:
            base_name = getattr(base, "id", None)
            if base_name in defs:
                merged.update(fields_of(base_name))
        merged.update(own_fields(node))
        return merged

    return {
        name: {
            "bases": [getattr(b, "id", "?") for b in defs[name].bases],
            "fields": dict(sorted(fields_of(name).items())),
        }
        for name in classes
        if name in defs
    }


def decoding_types(text: str) -> dict[str, str]:
    """speculative_config.decoding_type -> class: the keys of DecodingBaseConfig.from_dict's `config_classes` dict
    (where the file dispatches that way) and the Literal of each class declaring `decoding_type: Literal["X"]`."""
    tree = ast.parse(text)
    out: dict[str, str] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", None) == "decoding_type":
                lit = _literal(stmt.annotation)
                if lit is not None:
                    out[lit] = cls.name
        if cls.name != "DecodingBaseConfig":
            continue
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "config_classes" for t in node.targets)
                and isinstance(node.value, ast.Dict)
            ):
                for k, v in zip(node.value.keys, node.value.values):
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Name):
                        out.setdefault(k.value, v.id)
    return dict(sorted(out.items()))


def module_text(table: dict[str, dict], source: str, decoding: dict[str, str] | None = None) -> str:
    return (
        f'"""Option names of TensorRT-LLM\'s LLM API, extracted by devtools/llm_args_table.py from {source}."""\n\n'
        f"SOURCE = {source!r}\n"
        f"TABLE = {pprint.pformat(table, width=110, sort_dicts=True)}\n"
        f"DECODING_TYPES = {pprint.pformat(decoding or {}, width=110, sort_dicts=True)}\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("llm_args", type=Path)
    ap.add_argument("--source", required=True, help="repo path @ commit of the file read")
    args = ap.parse_args(argv)
    text = args.llm_args.read_text(encoding="utf-8")
    sys.stdout.write(module_text(extract(text), args.source, decoding_types(text)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
