"""Assemble and render the `trtspec plan` report (rich tables for humans, a dict for --json).

The recipe's backend (`builder.stages.registry`) says which stages run (`builder.stages.keys.plan_stages`) and
which memory plan sizes it (`MEMORY_PLANS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from builder.errors import UserError
from builder.plan.drafts import draft_memory
from builder.plan.memory import plan_memory
from builder.plan.own_engines import plan_own_engines
from builder.plan.sizes import GIB
from builder.quantize.placement import HostFacts, LlamaShape, Placement, place, recipe_host, this_host
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import draft_levels, max_draft_len, parse_checkpoint, resolve_architecture, tree_field
from builder.recipe.schema import Architecture, Recipe
from builder.stages.keys import plan_stages
from builder.stages.registry import backend_of

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # recipe model.dtype -> calibration dtype


def draft_architecture(loaded: LoadedRecipe) -> Architecture | None:
    """The draft network's shape from its checkpoint's config.json when local and the method's share reads one (the
    EAGLE draft's: `builder.plan.drafts.DraftMemory.architecture`); None otherwise."""
    return draft_memory(loaded.recipe.speculative).architecture(loaded)


def ptq_placement(recipe: Recipe, arch: Architecture, host: HostFacts) -> Placement:
    """Where the quantize stage's PTQ runs for `recipe` on `host` (`builder.quantize.placement.place`)."""
    a = arch
    shape = LlamaShape(
        a.hidden_size,
        a.num_layers,
        a.num_attention_heads,
        a.num_kv_heads,
        a.dim_per_head,
        a.intermediate_size,
        a.vocab_size,
        a.tie_word_embeddings,
    )
    want = recipe.target.gpus if recipe.target.device != "cpu" else len(host.gpu_bytes)
    return place(
        shape,
        host,
        TORCH_DTYPES[recipe.model.dtype],
        want,
        recipe.quantization.calibration.seq_len,
        int(recipe.target.runtime_reserve_gib * GIB),
    )


def ptq_report(loaded: LoadedRecipe, arch: Architecture, host: HostFacts | None = None) -> dict[str, Any] | None:
    """The plan's PTQ entry: None without a quantize stage; a pre-quantized checkpoint's note; else where PTQ
    runs and its memory (exit 2 when it cannot fit there). `host`: this host's facts (detected when None)."""
    recipe = loaded.recipe
    q = recipe.quantization
    ref = parse_checkpoint(recipe.model.checkpoint, loaded.dir_of(("model", "checkpoint")))
    if ref.local is not None and ref.local.is_dir():
        from builder.quantize.prequantized import check_recipe, detect

        pre = detect(ref.local)
        if pre is not None:
            check_recipe(recipe, pre)  # mode must be fp8, …
            return {
                "source": "pre-quantized",
                "text": "none: model.checkpoint is a modelopt FP8 checkpoint (its "
                "bytes and scales are used; calibration is ignored)",
            }
    if q.mode == "none" and q.kv_cache == "model_dtype":
        return None
    where = ptq_placement(recipe, arch, recipe_host(recipe.target.device, recipe.target.gpus, host or this_host()))
    if not where.fits:
        raise UserError(
            f"FP8 PTQ does not fit where it would run: {where.describe()}",
            field="quantization.mode",
            allowed="more GPUs (target.gpus) or memory, or model.checkpoint set to a modelopt FP8 "
            "checkpoint (no calibration)",
        )
    return {"source": "calibrated", **where.to_json()}


def build_report(loaded: LoadedRecipe, cache_dir: str | Path) -> dict[str, Any]:
    recipe = loaded.recipe
    arch = resolve_architecture(recipe, loaded.dir_of(("model", "checkpoint")))
    draft_len = max_draft_len(recipe, loaded.dir_of(tree_field(recipe)))
    ptq = ptq_report(loaded, arch)
    cache = Path(cache_dir)
    stages = []
    for s in plan_stages(loaded):
        out = s.output_dir(cache)
        stages.append(
            {
                "name": s.name,
                "description": s.description,
                "reads": s.reads,
                "upstream": s.upstream,
                "key": s.key,
                "output": str(out),
                "cached": (out / "manifest.json").is_file(),
            }
        )
    memory = MEMORY_PLANS[backend_of(recipe).memory_plan](loaded, arch, draft_len)
    return {
        "recipe": str(loaded.path),
        "method": recipe.speculative.method,
        "target": recipe.target.device,
        "backend": recipe.target.engine_backend,
        "max_draft_len": draft_len,
        "architecture": arch.model_dump(),
        "stages": stages,
        "ptq": ptq,
        "memory": memory.to_json(),
    }


def own_engines_plan(loaded: LoadedRecipe, arch: Architecture, draft_len: int) -> Any:
    """trtspec's own engines: per-slot contiguous KV in the graphs' real dtypes (`builder.plan.own_engines`)."""
    return plan_own_engines(loaded.recipe, arch, draft_len)


def paged_plan(loaded: LoadedRecipe, arch: Architecture, draft_len: int) -> Any:
    """A paged KV runtime (TensorRT-LLM's): blocks of tokens in a budget after weights (`builder.plan.memory`)."""
    recipe = loaded.recipe
    levels = max(1, draft_levels(recipe, loaded.dir_of(tree_field(recipe))))
    return plan_memory(recipe, arch, draft_len, levels, draft_architecture(loaded))


# Backend.memory_plan -> the plan that sizes it (the backends name one; `to_json` and `fits` are read from it)
MEMORY_PLANS: dict[str, Callable[[LoadedRecipe, Architecture, int], Any]] = {
    "own_engines": own_engines_plan,
    "paged": paged_plan,
}


def _gib(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


def render_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{report['recipe']}[/]: method={report['method']} target={report['target']} "
        f"backend={report['backend']} max_draft_len={report['max_draft_len']}"
    )
    st = Table(title="Stages")
    for col in ("stage", "does", "cache key", "status"):
        st.add_column(col)
    for s in report["stages"]:
        st.add_row(s["name"], s["description"], s["key"][:12], "cached" if s["cached"] else "to build")
    console.print(st)
    if report.get("ptq"):
        console.print(f"PTQ (quantize stage): {report['ptq']['text']}", soft_wrap=True)
    m = report["memory"]
    if m.get("layout"):
        console.print(f"Assumed: {m['layout']}", soft_wrap=True)
    mt = Table(title=f"Memory per rank — {m['device']} (tp={m['tp']}, pp={m['pp']})")
    mt.add_column("item")
    mt.add_column("value", justify="right")
    for c in m["components"]:
        mt.add_row(f"weights: {c['name']} ({c['dtype']})", _gib(c["bytes"]))
    for dtype, nbytes in sorted(m["weight_bytes_by_dtype"].items()):
        mt.add_row(f"weights in {dtype}", _gib(nbytes))
    rows = _own_rows(m) if m.get("layout") else _paged_rows(m)
    for k, v in rows:
        mt.add_row(k, v)
    console.print(mt)


def _own_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    """trtspec's own engines: per-slot contiguous KV, scratch per profile (`builder.plan.own_engines`)."""
    rows = [("weights total", _gib(m["weight_bytes"])), ("runtime reserve", _gib(m["runtime_reserve_bytes"]))]
    rows += [(f"scratch {k} (estimate)", _gib(v)) for k, v in m["scratch_bytes"].items()]
    rows += [(f"I/O slots {k}", _gib(v)) for k, v in m.get("io_slot_bytes", {}).items()]
    if m.get("pinned_host_bytes"):
        rows.append(("pinned host staging (host RAM)", _gib(m["pinned_host_bytes"])))
    rows += [
        (
            "scratch counted (arena + I/O slots)" if m.get("io_slot_bytes") else "scratch counted",
            _gib(m["activation_bytes"]),
        ),
        ("device memory", _gib(m["device_bytes"])),
        (f"KV bytes per token ({m['kv_dtype']})", f"{m['kv_bytes_per_token']:,}"),
    ]
    if m["draft_kv_bytes_per_token"]:
        rows.append(("EAGLE draft KV bytes per token", f"{m['draft_kv_bytes_per_token']:,}"))
    rows += [
        (
            f"KV allocated: {m['concurrent_sequences']} slots × {m['tokens_per_sequence']:,} tokens",
            _gib(m["kv_budget_bytes"]),
        ),
        ("headroom", _gib(m["headroom_bytes"])),
        ("fits", "yes" if m["fits"] else "[red]NO[/]"),
    ]
    return rows


def _paged_rows(m: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("weights total", _gib(m["weight_bytes"])),
        ("runtime reserve", _gib(m["runtime_reserve_bytes"])),
        ("activations (estimate)", _gib(m["activation_bytes"])),
        ("device memory", _gib(m["device_bytes"])),
        ("free after weights", _gib(m["free_bytes"])),
        (f"KV budget (× {m['kv_cache_fraction']})", _gib(m["kv_budget_bytes"])),
        (f"KV bytes per token ({m['kv_dtype']})", f"{m['kv_bytes_per_token']:,}"),
        (f"KV blocks of {m['tokens_per_block']} tokens", f"{m['kv_blocks']:,}"),
        ("KV tokens that fit", f"{m['kv_tokens']:,}"),
        (f"concurrent sequences at {m['tokens_per_sequence']:,} tokens", f"{m['concurrent_sequences']:,}"),
        ("headroom", _gib(m["headroom_bytes"])),
        ("fits", "yes" if m["fits"] else "[red]NO[/]"),
    ]
    return rows
