"""Assemble and render the `trtspec plan` report (rich tables for humans, a dict for --json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.plan.memory import GIB, plan_memory
from builder.plan.own_engines import plan_own_engines
from builder.plan.stages import plan_stages
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import draft_levels, max_draft_len, resolve_architecture, tree_field


def build_report(loaded: LoadedRecipe, cache_dir: str | Path) -> dict[str, Any]:
    recipe = loaded.recipe
    arch = resolve_architecture(recipe, loaded.dir_of(("model", "checkpoint")))
    draft_len = max_draft_len(recipe, loaded.dir_of(tree_field(recipe)))
    cache = Path(cache_dir)
    stages = []
    for s in plan_stages(loaded):
        out = s.output_dir(cache)
        stages.append({"name": s.name, "description": s.description, "reads": s.reads, "upstream": s.upstream,
                       "key": s.key, "output": str(out), "cached": (out / "manifest.json").is_file()})
    if recipe.target.engine_backend == "trtllm":
        memory = plan_memory(recipe, arch, draft_len, max(1, draft_levels(recipe, loaded.dir_of(tree_field(recipe)))))
    else:  # trtspec's own engines: per-slot contiguous KV in the graphs' real dtypes
        memory = plan_own_engines(recipe, arch, draft_len)
    return {
        "recipe": str(loaded.path),
        "method": recipe.speculative.method,
        "target": recipe.target.device,
        "backend": recipe.target.engine_backend,
        "max_draft_len": draft_len,
        "architecture": arch.model_dump(),
        "stages": stages,
        "memory": memory.to_json(),
    }


def _gib(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


def render_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{report['recipe']}[/]: method={report['method']} target={report['target']} "
                  f"backend={report['backend']} max_draft_len={report['max_draft_len']}")
    st = Table(title="Stages")
    for col in ("stage", "does", "cache key", "status"):
        st.add_column(col)
    for s in report["stages"]:
        st.add_row(s["name"], s["description"], s["key"][:12],
                   "cached" if s["cached"] else "to build")
    console.print(st)
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
        ("scratch counted (arena + I/O slots)" if m.get("io_slot_bytes") else "scratch counted", _gib(m["activation_bytes"])),
        ("device memory", _gib(m["device_bytes"])),
        (f"KV bytes per token ({m['kv_dtype']})", f"{m['kv_bytes_per_token']:,}"),
    ]
    if m["draft_kv_bytes_per_token"]:
        rows.append(("EAGLE draft KV bytes per token", f"{m['draft_kv_bytes_per_token']:,}"))
    rows += [
        (f"KV allocated: {m['concurrent_sequences']} slots × {m['tokens_per_sequence']:,} tokens", _gib(m["kv_budget_bytes"])),
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
