"""export: the ONNX step graphs the engines run (builder.export), for the recipe's method.

Folders: `target-greedy/`, `target-rejection/` (Medusa heads fused in when the recipe uses Medusa),
`eagle/` for EAGLE recipes, and `export.json` with what the engine stage needs. The KV capacity
leaves room for the recipe's draft and for Lookahead's default window (`--method lookahead`).
A method whose draft reads other target features (`Method.target_features`: EAGLE-3) gets target graphs whose
`hidden` is its draft's fc over the outputs of its `aux_layers` (`builder.export.target.Features`); export.json's
"eagle" entry records those layers ("aux_layers", output-of-layer ids), and the engine stage's engine.json with it.

Precision (`builder.export.contract.Precision`): cpu targets export the CPU form, float32 throughout (an
FP8 KV cache as Q/DQ in front of float32 caches). GPU targets export the GPU form: the recipe's
model.dtype (bfloat16 / float16) with FP8 GEMMs through Q/DQ, and the target's KV cache stored as
FLOAT8E4M3FN (one byte per element, the quantize stage's k / v scales) when quantization.kv_cache is fp8,
else in model.dtype (the EAGLE draft, kept unquantized, caches in model.dtype); its `.ort.onnx` twin is
the float32 lowering ONNX Runtime runs (`builder.export.lower`), and `{stem}.trt.onnx` the TensorRT form.
`export.json` records both precisions ("precision", "draft_precision").

FP8 recipes (a `quantize` stage upstream): the target comes from modelopt's unified FP8 checkpoint
(`builder.quantize.checkpoint`) and its graphs carry the Q/DQ nodes (`builder.export.qdq`); draft parts
stay in the model dtype as the recipe's `exclude_modules` say (the EAGLE draft reads the target's LM
head, FP8 if that is quantized). Then the build's quality report is measured here, right after the
graphs exist: `quality.json` and `quality.md` in this stage's folder (`builder.quantize.quality`: FP8 vs
the unquantized checkpoint, whose graphs are exported to a temporary folder for the comparison).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from builder.export.contract import CPU, FP8, Precision
from builder.handoffs import ExportInfo, ExportJson
from builder.recipe.loader import LoadedRecipe
from builder.speculative import registry
from builder.speculative.method import DRAFT_GRAPH, FUSED_HEADS, Facts, resolve
from builder.stages.inputs import calibration_source, tree_contents
from builder.stages.parts import DTYPES, Parts
from builder.stages.stage import Backend, Stage, StageContext

EXPORT_INFO = ExportJson.FILE
DRAFT_GRAPH_FOLDER = "eagle"  # the draft graph's folder (a DRAFT_GRAPH method's; the EAGLE graph contract)
QUALITY_JSON, QUALITY_MD = "quality.json", "quality.md"


def capacity(max_seq_len: int, config: Any) -> int:
    """KV capacity of the target graphs: the sequence, and room for the drafter's largest step or the default room
    every engine keeps (`registry.default_room`: `--method lookahead` / `ngram` on any recipe's engine)."""
    return max_seq_len + max(registry.facts(config).max_nodes, registry.default_room())


def precisions(recipe: Any) -> tuple[Precision, Precision]:
    """(target, EAGLE draft) precision of the graphs a recipe's export writes (module docstring)."""
    if recipe.target.device == "cpu":
        return CPU, CPU
    act = DTYPES[recipe.model.dtype]
    return Precision(act, FP8 if recipe.quantization.kv_cache == "fp8" else act), Precision(act, act)


def run(ctx: StageContext, out: Path) -> None:
    parts = Parts(ctx.loaded, ctx.loaded.recipe.speculative.method)
    fp8 = None
    if "quantize" in ctx.upstream:
        from builder.quantize.checkpoint import read_fp8_checkpoint

        ctx.say("reading the FP8 checkpoint (quantize stage)")
        ckpt = read_fp8_checkpoint(ctx.upstream["quantize"])
        model, fp8 = ckpt.model, ckpt.spec
    else:
        ctx.say("loading the target")
        model = parts.model()
    info = export_graphs(parts, model, out, fp8, ctx.say, precision=precisions(ctx.loaded.recipe))
    if ctx.loaded.recipe.target.device != "cpu":  # the same graphs in TensorRT's form (builder.export.tensorrt)
        from builder.export.tensorrt import write_tensorrt_graphs

        info["tensorrt"] = write_tensorrt_graphs(out, info["variant"], ctx.say)
    ExportJson.model_validate({"format": ExportJson.FORMAT, **info}).write(out)
    ctx.info = facts = ExportInfo(
        variant=info["variant"], capacity=info["capacity"], fp8=fp8 is not None, precision=info["precision"]
    )
    if fp8 is not None:
        facts.quality = _quality(ctx, parts, model, fp8, out, info)


def export_graphs(
    parts: Parts,
    model,
    out: Path,
    fp8=None,
    say: Callable[[str], None] = lambda _m: None,
    variant: str | None = None,
    precision: tuple[Precision, Precision] = (CPU, CPU),
) -> dict[str, Any]:
    """Export the recipe's graphs for `model` (FP8 where `fp8` says) into `out` in the (target, draft)
    `precision`; the export.json data."""
    from builder.engines.ort.build import pick_variant
    from builder.export.nbits import BITS
    from builder.export.target import Features, export_target

    config = parts.drafter_config()
    method = registry.of(config)
    facts = method.facts(config)
    cap = capacity(parts.max_seq_len, config)
    variant = pick_variant(variant, model.cfg.head_dim, precision[0])
    heads = parts.draft(model) if method.exports == FUSED_HEADS else None  # fused into the target graphs
    k = facts.top_k if heads is not None else None
    draft = parts.draft(model) if method.exports == DRAFT_GRAPH else None
    features = None  # EAGLE-3: the target graphs' `hidden` is the draft's fc over its aux layers' outputs
    if method.target_features and draft is not None:
        features = Features(tuple(draft.aux_layers), draft.fc.weight.detach())
    tag = ("" if fp8 is None else ", FP8") + (
        "" if precision[0] == CPU else f", {precision[0].act}, KV {precision[0].kv}"
    )
    if features is not None:
        tag += f", features of layers {list(features.layers)} through the draft's fc"
    modes = ("greedy", "rejection") if parts.verification == "rejection" else ("greedy",)
    nbits = BITS[parts.draft_weights] if parts.draft_weights is not None and precision[0] == CPU else None
    about = "" if heads is None or nbits is None else f", Medusa heads {parts.draft_weights}"
    for mode in modes:
        say(f"exporting the target step graph ({mode}, {variant}{tag}{about})")
        export_target(
            model,
            out / f"target-{mode}",
            variant=variant,
            mode=mode,
            max_seq_len=cap,
            medusa=heads,
            medusa_topk=k,
            fp8=fp8,
            precision=precision[0],
            medusa_nbits=nbits,
            features=features,
        )
    info: dict[str, Any] = {
        "variant": variant,
        "capacity": cap,
        "max_seq_len": parts.max_seq_len,
        "drafter": config.model_dump(mode="json"),
        "medusa": None if heads is None else {"heads": heads.num_heads, "top_k": k},
        "eagle": None,
        "fp8": fp8 is not None,
        "precision": precision[0].as_dict(),
        "draft_precision": precision[1].as_dict(),
        "draft_weights": None if nbits is None else parts.draft_weights,
    }
    if draft is not None:
        info["eagle"] = _draft_graph(say, parts, draft, model, out, variant, facts, fp8, precision[1], nbits)
        if features is not None:
            info["eagle"]["aux_layers"] = list(features.layers)
    return info


def _draft_graph(
    say: Callable[[str], None],
    parts: Parts,
    draft,
    model,
    out: Path,
    variant: str,
    facts: Facts,
    fp8,
    precision: Precision = CPU,
    nbits: int | None = None,
) -> dict[str, Any]:
    """The draft graph (`eagle/`, the EAGLE graph contract) of `draft` by the method's exporter
    (`Method.export_draft`)."""
    export_draft = resolve(parts.method_of.export_draft or "")
    cap = parts.max_seq_len + facts.tentative + 1
    head = None if fp8 is None else fp8.linears.get("lm_head")
    vocab = "" if draft.draft_vocab_size is None else f", draft vocabulary {draft.draft_vocab_size}"
    weights = "" if nbits is None else f", weights {parts.draft_weights}"
    what = parts.method_of.draft.what if parts.method_of.draft is not None else "draft"  # "EAGLE draft", …
    own_head = parts.method_of.target_features  # (EAGLE-3 drafts with its own LM head, never the target's FP8 one)
    fp8_head = "" if head is None or own_head else ", FP8 LM head"
    say(f"exporting the {what} graph ({variant}{fp8_head}{vocab}{weights})")
    export_draft(
        draft,
        model.lm_head.weight,
        out / DRAFT_GRAPH_FOLDER,
        variant=variant,
        top_k=facts.top_k,
        max_seq_len=cap,
        lm_head_fp8=head,
        precision=precision,
        nbits=nbits,
    )
    c = draft.cfg
    return {
        "layers": getattr(draft, "num_layers", c.num_hidden_layers),  # EAGLE-3: its one midlayer
        "kv_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "hidden": c.hidden_size,
        "top_k": facts.top_k,
        "capacity": cap,
        "draft_vocab": draft.draft_vocab_size,
    }


def open_side(parts: Parts, cfg, folder: Path, info: dict[str, Any], threads: int = 1):
    """`builder.quantize.quality.Side` over the graphs exported into `folder`: the ORT engine and a drafter
    factory for none, the default Lookahead and the recipe's own method."""
    from builder.engines.ort.eagle import OrtEagleNet
    from builder.engines.ort.target import OrtEngine, TargetSpec
    from builder.quantize.quality import Side

    med = info["medusa"]
    spec = TargetSpec(
        folder / "target-greedy" / "target.ort.onnx",
        folder / "target-rejection" / "target.ort.onnx",
        cfg.num_hidden_layers,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.hidden_size if not (info["eagle"] or {}).get("aux_layers") else info["eagle"]["hidden"],  # EAGLE-3: fc
        cfg.vocab_size,
        info["capacity"],
        None if med is None else (med["heads"], med["top_k"]),
    )
    engine = OrtEngine(spec, info["max_seq_len"], 1, threads)
    drafters = {}
    for name in dict.fromkeys(("none", "lookahead", parts.method)):  # the quality report's three drafters
        config = Parts(parts.loaded, name).drafter_config()
        method = registry.of(config)
        net = None
        if method.exports == DRAFT_GRAPH:
            e = info["eagle"]
            net = OrtEagleNet(
                folder / DRAFT_GRAPH_FOLDER / "eagle.ort.onnx",
                layers=e["layers"],
                kv_heads=e["kv_heads"],
                head_dim=e["head_dim"],
                hidden_size=e["hidden"],
                top_k=e["top_k"],
                capacity=e["capacity"],
                max_batch_size=1,
                threads=threads,
            )
        drafters[method.facts(config).label] = method.make_drafter(config, net)
    return Side(engine, drafters)


def _quality(ctx: StageContext, parts: Parts, fp8_model, spec, out: Path, info: dict[str, Any]) -> dict[str, Any]:
    """quality.json / quality.md (module docstring); the summary the manifest records."""
    from builder.data.humaneval import heldout_prompts
    from builder.quantize.quality import NUM_PROMPTS, markdown, measure
    from builder.stages.parts import load_tokenizer, stop_ids

    ctx.say("quality: loading the unquantized target")
    fp32_model = parts.model()
    tok = load_tokenizer(parts.tokenizer_dir())
    prompts = [tok.encode(p).ids for p in heldout_prompts(NUM_PROMPTS)]
    with tempfile.TemporaryDirectory(prefix="trtspec-fp32-") as tmp:
        ctx.say("quality: exporting the unquantized graphs for the comparison")
        act = info["precision"]["act"]  # the unquantized side in the same activation dtype (model.dtype on GPUs)
        export_graphs(
            parts,
            fp32_model,
            Path(tmp),
            None,
            variant=info["variant"],
            precision=(Precision(act, act), Precision(act, act)),
        )
        report = measure(
            fp32_model,
            fp8_model,
            spec,
            open_side(parts, fp32_model.cfg, Path(tmp), info),
            open_side(parts, fp8_model.cfg, out, info),
            prompts,
            stop_ids(parts.base_dir()),
            say=ctx.say,
        )
    (out / QUALITY_JSON).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / QUALITY_MD).write_text(markdown(report), encoding="utf-8")
    return {
        "perplexity": report["perplexity"],
        "token_agreement": report["greedy"]["token_agreement"],
        "tau": {m: {k: r[k]["tau"] for k in r} for m, r in report["methods"].items()},
    }


def inputs(loaded: LoadedRecipe, _backend: Backend) -> dict[str, Any]:
    """The tree's contents; the counted calibration text of an EAGLE draft vocabulary; a developer override of
    the ONNX Runtime graph variant (`builder.engines.ort.build.pick_variant`)."""
    out: dict[str, Any] = {"env.TRTSPEC_ORT_VARIANT": os.environ.get("TRTSPEC_ORT_VARIANT"), **tree_contents(loaded)}
    if getattr(loaded.recipe.speculative, "draft_vocab", None) is not None:
        out["quantization.calibration.source"] = calibration_source(loaded)  # the counted text
    return out


STAGE = Stage(
    name="export",
    description="ONNX step + draft graphs, FP8 Q/DQ",
    reads=("speculative", "build", "target.device"),
    tools=("torch", "onnx", "onnxruntime"),
    needs=("load",),
    optional=("quantize",),
    run=run,
    info=ExportInfo,
    output=ExportJson,
    inputs=inputs,
)
