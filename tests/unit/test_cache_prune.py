"""`trtspec cache list | prune` (builder/stages/prune.py) on real stores: entries made by `Store.staging`
with real manifests, shared files as hard links, stamps as a build leaves them.

Oracles: sizes from a brute-force walk of the files on disk (each inode once, as `du` counts), the removal
order by a greedy that rescans the disk after every removal; "in use" by a separate process holding an
entry, as a server would; a real build of the tiny recipe for what the runner stamps and holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from builder.cli import cli
from builder.recipe.loader import load_recipe
from builder.stages.manifest import Manifest
from builder.stages.prune import ORDER, parse_age, parse_size, plan, remove, scan, unique_bytes
from builder.stages.runner import build
from builder.stages.store import Store

REPO = Path(__file__).resolve().parents[2]


def make(
    store: Store,
    stage: str,
    key: str,
    files: dict[str, int],
    links: dict[str, Path] | None = None,
    used: float | None = None,
) -> Path:
    """An entry with files of the given sizes (distinct bytes) and hard links to other entries' files."""
    with store.staging(stage, key) as tmp:
        for name, size in files.items():
            (tmp / name).write_bytes(os.urandom(size))
        for name, src in (links or {}).items():
            os.link(src, tmp / name)
        Manifest(stage, key, None, {}, {}).write(tmp)
    if used is not None:
        store.touch(stage, key, used)
    return store.dir(stage, key)


def disk_bytes(root: Path, skip: set[str] = frozenset()) -> int:
    """Brute force: every regular file under the stage folders, each inode once."""
    seen: dict[tuple[int, int], int] = {}
    for stage in ORDER:
        for p in (root / stage).rglob("*") if (root / stage).is_dir() else ():
            if p.is_file() and not p.is_symlink() and f"{stage}/{p.relative_to(root / stage).parts[0]}" not in skip:
                st = p.lstat()
                seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def three_builds(root: Path) -> tuple[Store, float]:
    """Three builds' chains (load → export → engine → repo), the engines hard-linking their exports' graphs,
    used 30, 20 and 10 days ago; the second and third share one load entry (one checkpoint)."""
    store, now = Store(root), time.time()
    day = 86400.0
    for i, age in enumerate((30, 20, 10)):
        t = now - age * day
        load = make(store, "load", "L0" if i else "L-first", {"source.json": 100}, used=t)
        export = make(store, "export", f"X{i}", {"graph.onnx": 2000 + i, "graph.data": 30_000}, used=t)
        make(store, "engine", f"E{i}", {"engine.json": 300}, {"graph.data": export / "graph.data"}, used=t)
        make(store, "repo", f"R{i}", {"config.pbtxt": 500 + 7 * i}, used=t)
        del load
    return store, now


def test_sizes_count_shared_files_once(tmp_path: Path) -> None:
    three_builds(tmp_path)
    entries = scan(tmp_path)
    assert len(entries) == 11  # 2 loads + 3 × (export, engine, repo)
    assert unique_bytes(entries) == disk_bytes(tmp_path)
    engine, export = (next(e for e in entries if e.key == k) for k in ("E1", "X1"))
    man = [(e.folder / "manifest.json").stat().st_size for e in (engine, export)]
    assert engine.bytes == 300 + 30_000 + man[0]  # its own files and the linked graph data
    assert unique_bytes([engine, export]) == 300 + 2001 + 30_000 + sum(man)


def test_plan_by_age_then_size_is_the_greedy_on_disk(tmp_path: Path) -> None:
    store, now = three_builds(tmp_path)
    old = plan(scan(tmp_path), older_than=parse_age("25d"), now=now)
    assert [f"{e.stage}/{e.key}" for e in old] == ["repo/R0", "engine/E0", "export/X0", "load/L-first"]

    cap = disk_bytes(tmp_path) - 40_000  # forces more than the oldest build out
    chosen = plan(scan(tmp_path), max_bytes=cap, now=now)
    # oracle: least recently used first, downstream first within a build, rescanning the disk each time
    entries = sorted(scan(tmp_path), key=lambda e: (e.used, -ORDER.index(e.stage)))
    gone: set[str] = set()
    for e in entries:
        if disk_bytes(tmp_path, gone) <= cap:
            break
        gone.add(f"{e.stage}/{e.key}")
    assert [f"{e.stage}/{e.key}" for e in chosen] == [
        f"{e.stage}/{e.key}" for e in entries if f"{e.stage}/{e.key}" in gone
    ]
    assert chosen[:4] == [e for e in chosen if e.used < now - 25 * 86400]  # the oldest build went first

    result = remove(tmp_path, chosen)
    assert result["busy"] == [] and sorted(result["removed"]) == sorted(gone)
    assert disk_bytes(tmp_path) <= cap
    for e in scan(tmp_path):  # what is left is whole: each entry is a cache hit
        assert store.hit(e.stage, e.key) is not None
    assert not any(p.name.startswith(".tmp-") for s in ORDER for p in (tmp_path / s).glob(".*"))


def test_stage_filter_and_damaged_entries(tmp_path: Path) -> None:
    store, now = three_builds(tmp_path)
    only = plan(scan(tmp_path), older_than=parse_age("15d"), stages=["engine"], now=now)
    assert [e.key for e in only] == ["E0", "E1"]
    bad = store.dir("repo", "R2") / "config.pbtxt"
    bad.write_bytes(b"x")  # resized since its manifest: damaged, pruned whatever its age
    chosen = plan(scan(tmp_path), older_than=parse_age("100d"), now=now)
    assert [f"{e.stage}/{e.key}" for e in chosen] == ["repo/R2"] and chosen[0].damaged


def test_entries_in_use_are_kept(tmp_path: Path) -> None:
    store, now = three_builds(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from builder.stages.store import Store; "
                f"Store({str(tmp_path)!r}).hold('engine', 'E0'); print('held', flush=True); time.sleep(60)"
            ),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with store.lock("export", "X0"):  # a build of that key is running
            result = remove(tmp_path, plan(scan(tmp_path), older_than=parse_age("25d"), now=now))
    finally:
        holder.kill()
        holder.wait()
    assert result["busy"] == ["engine/E0", "export/X0"]
    assert result["removed"] == ["repo/R0", "load/L-first"]
    assert store.hit("engine", "E0") is not None and store.hit("export", "X0") is not None
    # the holder is gone: its lock went with it
    assert remove(tmp_path, plan(scan(tmp_path), older_than=parse_age("25d"), now=now))["removed"] == [
        "engine/E0",
        "export/X0",
    ]


def test_a_build_stamps_and_holds_what_it_reaches(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    t0 = time.time()
    result = build(load_recipe(str(REPO / "recipes" / "tiny-llama3.yaml")), cache, until="load")
    (run,) = result.runs
    store = Store(cache)
    used = store.last_used("load", run.key)
    assert used is not None and t0 - 1 <= used <= time.time() + 1
    with store.claim("load", run.key) as free:  # this process holds it
        assert not free
    out = subprocess.run(
        [sys.executable, "-m", "builder.cli", "cache", "prune", "--cache-dir", str(cache), "--max-size", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "in use" in out.stderr and "1 in use, kept" in out.stdout
    assert store.hit("load", run.key) is not None
    (entry,) = scan(cache)
    assert entry.what.endswith("tests/fixtures/tiny-llama3/base")  # the recipe's checkpoint, as `list` shows it


def test_cli_errors_and_listing(tmp_path: Path) -> None:
    runner = CliRunner()
    for args, field in [
        (["prune"], "--older-than / --max-size"),
        (["prune", "--older-than", "3x"], "--older-than"),
        (["prune", "--max-size", "10Q"], "--max-size"),
        (["prune", "--max-size", "1G", "--stage", "x"], "--stage"),
    ]:
        r = runner.invoke(cli, ["cache", *args, "--cache-dir", str(tmp_path)])
        assert r.exit_code == 2 and f"error: {field}: " in r.output and "allowed:" in r.output, r.output
    three_builds(tmp_path)
    r = runner.invoke(cli, ["cache", "prune", "--cache-dir", str(tmp_path), "--older-than", "15d", "--dry-run"])
    assert r.exit_code == 0 and "would remove 7 of 11 entries" in r.output, r.output
    assert len(scan(tmp_path)) == 11  # a dry run removes nothing
    r = runner.invoke(cli, ["cache", "list", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0 and r.output.splitlines()[0].startswith("repo       R0") and "11 entries" in r.output
    assert parse_size("1.5G") == 3 << 29 and parse_size("512") == 512 and parse_age("2w") == 14 * 86400


def test_a_cache_it_cannot_stamp_still_serves_hits(tmp_path: Path) -> None:
    """A read-only cache (a shared, pulled one) is used untracked: stamping and holding are best effort. (Root
    ignores permission bits, so the stamp and lock folders are made unwritable by being files.)"""
    cache = tmp_path / "cache"
    loaded = load_recipe(str(REPO / "recipes" / "tiny-llama3.yaml"))
    first = build(loaded, cache, until="load").runs[0]
    for name in (".used", ".locks"):
        target = cache / name
        for p in sorted(target.iterdir(), reverse=True):
            p.unlink()
        target.rmdir()
        target.write_text("not a folder")
    again = build(loaded, tmp_path / "cache", until="load").runs[0]
    assert again.cached and again.key == first.key


def test_under_a_size_cap_an_entry_in_use_is_replaced_by_the_next(tmp_path: Path) -> None:
    import json

    store, _now = three_builds(tmp_path)
    cap = disk_bytes(tmp_path) - 2500
    # oracle: the greedy over the disk, least recently used first, with export/X0 never a candidate
    gone: set[str] = set()
    for e in sorted((e for e in scan(tmp_path) if e.key != "X0"), key=lambda e: (e.used, -ORDER.index(e.stage))):
        if disk_bytes(tmp_path, gone) <= cap:
            break
        gone.add(f"{e.stage}/{e.key}")
    store.hold("export", "X0")  # in use by this process (as by a server) until the test process exits
    r = CliRunner().invoke(cli, ["cache", "prune", "--cache-dir", str(tmp_path), "--max-size", str(cap), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["busy"] == ["export/X0"] and set(out["removed"]) == gone and len(gone) > 2
    assert out["bytes_after"] == disk_bytes(tmp_path) <= cap and store.hit("export", "X0") is not None


def test_files_linked_from_outside_the_cache_are_not_counted_as_freed(tmp_path: Path) -> None:
    import json

    cache = tmp_path / "cache"
    store, now = three_builds(cache)
    outside = tmp_path / "bundle.data"
    os.link(store.dir("export", "X0") / "graph.data", outside)  # as a deploy bundle links what it can
    before = disk_bytes(cache)
    r = CliRunner().invoke(cli, ["cache", "prune", "--cache-dir", str(cache), "--older-than", "25d", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["removed"] == ["repo/R0", "engine/E0", "export/X0", "load/L-first"]
    freed_on_disk = before - disk_bytes(cache) - outside.stat().st_size  # the linked file stays on disk
    assert out["bytes_before"] - out["bytes_after"] == freed_on_disk and outside.is_file()
    assert out["bytes_before"] == before - outside.stat().st_size
