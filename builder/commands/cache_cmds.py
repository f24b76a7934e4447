"""`trtspec cache list | prune`: what the build cache holds, and removing what is no longer used."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import click

from builder.errors import UserError

_CACHE = click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The build cache (<cache>/<stage>/<key>/).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cache() -> None:
    """The build cache: list its entries, prune the unused ones.

    \b
    trtspec cache list
    trtspec cache prune --older-than 14d --dry-run
    trtspec cache prune --max-size 50G
    """


@cache.command("list")
@_CACHE
@click.option("--json", "as_json", is_flag=True, help="Print the entries as one JSON object.")
def list_(cache_dir: str, as_json: bool) -> None:
    """Every entry, least recently used first: stage, key, size, last use, state; the total on disk."""
    from builder.stages.prune import by_lru, human, scan, unique_bytes

    entries = by_lru(scan(cache_dir))
    total = unique_bytes(entries)
    if as_json:
        click.echo(
            json.dumps({"cache_dir": cache_dir, "bytes": total, "entries": [_row(e) for e in entries]}, indent=2)
        )
        return
    now = time.time()
    for e in entries:
        state = "damaged" if e.damaged else ""
        click.echo(
            f"{e.stage:10s} {e.key:22s} {human(e.bytes):>10s}  used {_age(now - e.used):>7s} ago  {state or e.what}"
        )
    click.echo(
        f"{len(entries)} entries, {human(total)} on disk in {cache_dir} (files shared by entries counted once; "
        "files also linked from outside the cache not counted: pruning cannot free them)"
    )


@cache.command()
@_CACHE
@click.option("--older-than", metavar="AGE", help="Remove entries unused for longer than AGE (30m, 12h, 14d, 2w).")
@click.option(
    "--max-size",
    metavar="SIZE",
    help="Then remove least recently used entries until the cache takes at most SIZE (500M, 20G, 1T).",
)
@click.option(
    "--stage",
    "stages",
    multiple=True,
    metavar="STAGE",
    help="Only entries of this stage are candidates (repeatable): load, quantize, export, checkpoint, engine, repo.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def prune(
    cache_dir: str, older_than: str | None, max_size: str | None, stages: tuple[str, ...], dry_run: bool, as_json: bool
) -> None:
    """Remove cache entries nobody uses: unused for longer than --older-than, then the least recently used
    beyond --max-size; damaged entries always.

    \b
    Last use is stamped by every build, pull and cache hit. Entries a running build, server or generate run
    holds are skipped (and listed). Among entries of one build the downstream stages go first (repo, engine,
    …), so what rebuilds slowest stays longest. Removal is atomic per entry.
    """
    from builder.stages.prune import ORDER, human, parse_age, parse_size, plan, remove, scan, unique_bytes

    if older_than is None and max_size is None:
        raise UserError(
            "say what to prune", field="--older-than / --max-size", allowed="--older-than AGE, --max-size SIZE, or both"
        )
    bad = [s for s in stages if s not in ORDER]
    if bad:
        raise UserError(f"unknown stage {bad[0]!r}", field="--stage", allowed=", ".join(ORDER))
    age = None if older_than is None else parse_age(older_than)
    cap = None if max_size is None else parse_size(max_size)
    entries = scan(cache_dir)
    before = unique_bytes(entries)
    say = (lambda _m: None) if as_json else (lambda m: click.echo(m, err=True))
    if dry_run:
        chosen = plan(entries, older_than=age, max_bytes=cap, stages=stages or None)
        result = {"removed": [], "busy": [], "would_remove": [f"{e.stage}/{e.key}" for e in chosen]}
        for e in chosen:
            say(f"would remove {e.stage}/{e.key} ({human(e.bytes)}{', damaged' if e.damaged else ''})")
    else:  # entries in use are kept; under a size cap the next least recently used go in their place
        result = {"removed": [], "busy": []}
        while True:
            step = remove(
                cache_dir,
                plan(scan(cache_dir), older_than=age, max_bytes=cap, stages=stages or None, keep=result["busy"]),
                say,
            )
            result["removed"] += step["removed"]
            result["busy"] += step["busy"]
            if cap is None or not step["busy"]:
                break
    gone = set(result["removed"]) | set(result.get("would_remove", []))
    kept = [e for e in entries if f"{e.stage}/{e.key}" not in gone]
    after = unique_bytes(kept)
    if as_json:
        click.echo(
            json.dumps(
                {"cache_dir": cache_dir, "dry_run": dry_run, "bytes_before": before, "bytes_after": after, **result},
                indent=2,
            )
        )
        return
    verb = "would free" if dry_run else "freed"
    busy = f"; {len(result['busy'])} in use, kept" if result["busy"] else ""
    n = len(result["would_remove"] if dry_run else result["removed"])
    click.echo(
        f"{'would remove' if dry_run else 'removed'} {n} of {len(entries)} entries, {verb} "
        f"{human(before - after)}: {human(after)} left{busy}"
    )


def _row(e) -> dict:  # noqa: ANN001 - a builder.stages.prune.Entry
    return {
        "stage": e.stage,
        "key": e.key,
        "what": e.what,
        "bytes": e.bytes,
        "damaged": e.damaged,
        "created": e.created,
        "last_used": datetime.fromtimestamp(e.used, timezone.utc).isoformat(timespec="seconds"),
    }


def _age(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.1f}{unit}"
    return f"{max(seconds, 0):.0f}s"
