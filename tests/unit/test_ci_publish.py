"""Publishing (`trtspec ci --publish`) and `trtspec pull`: content-addressed, index last, resumable, hashes checked.

A real `trtspec ci` run (the CPU Lookahead recipe, built and checked; the TensorRT-LLM one, stopped at its
engine stage) publishes to a local folder; the same entries go to fsspec's in-memory filesystem. The
oracle is the build cache itself: every stage manifest lists its files' sha256, so a published blob, a
pulled file and the pulled manifest must all match it byte for byte — and `trtspec build` must find the
pulled cache complete. An interrupted upload is simulated by a fake network fault (an fsspec `mv` that
raises after a few files), the one thing this machine cannot produce on demand.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from builder.ci.publish import INDEX, Target, blob_rel, publish
from builder.stages.manifest import MANIFEST, Manifest
from tests.unit.recipe_helpers import run
from tests.unit.test_ci import REPO, by_id, ci, in_repo

CPU, GPU = "recipes/tiny-llama3.yaml", "recipes/tiny-llama3-trtllm-none.yaml"


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    home = tmp_path_factory.mktemp("publish")
    (home / "m.yaml").write_text(
        f'name: pub\nrecipes: ["{REPO / CPU}", "{REPO / GPU}"]\nchecks: {{prompts: 1, max_new_tokens: 4}}\n'
    )
    res = ci(
        "--matrix",
        home / "m.yaml",
        "--cache-dir",
        home / "cache",
        "--publish",
        home / "pub",
        "--json",
        home / "ci.json",
    )
    assert res.exit_code == 0, res.output
    return home, json.loads((home / "ci.json").read_text())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pull(*args) -> object:
    with in_repo():
        return run("pull", *map(str, args))


def test_every_stage_is_published_by_key_with_its_manifest_and_an_index(published):
    home, doc = published
    index = json.loads((home / "pub" / INDEX).read_text())
    assert set(index["recipes"]) == {CPU, GPU} and doc["publish"]["stages"] == 6  # 4 CPU stages + load, checkpoint
    for entry in doc["entries"]:
        rows = index["recipes"][entry["id"]]["stages"]
        assert [(r["stage"], r["key"]) for r in rows] == [(s["stage"], s["key"]) for s in entry["stages"]]
        for r, s in zip(rows, entry["stages"]):
            folder = Path(s["output"])
            m = Manifest.read(folder)
            assert [(f["path"], f["bytes"], f["sha256"]) for f in r["files"]] == [
                (f["path"], f["bytes"], f["sha256"]) for f in m.outputs
            ]
            raw = (folder / MANIFEST).read_bytes()
            assert (home / "pub" / "stages" / r["stage"] / r["key"] / MANIFEST).read_bytes() == raw
            assert r["manifest_sha256"] == sha(raw) and (home / "pub" / blob_rel(sha(raw))).read_bytes() == raw
            for f in m.outputs:
                assert sha((home / "pub" / blob_rel(f["sha256"])).read_bytes()) == f["sha256"]
    assert not list((home / "pub").rglob("*.tmp-*"))


def test_publishing_again_uploads_nothing(published):
    home, doc = published
    before = (home / "pub" / INDEX).read_text()
    stats = publish(Target(str(home / "pub"), create=True), doc["entries"])
    files = sum(len(Manifest.read(Path(s["output"])).outputs) + 1 for e in doc["entries"] for s in e["stages"])
    assert stats["uploaded"] == 0 and stats["skipped"] == files
    assert json.loads((home / "pub" / INDEX).read_text())["recipes"].keys() == json.loads(before)["recipes"].keys()


def test_pull_restores_a_cache_that_builds_nothing(published, tmp_path):
    home, doc = published
    res = pull(home / "pub" / INDEX, CPU, "--cache-dir", tmp_path / "cache")
    assert res.exit_code == 0, res.output
    assert "a build here finds every pulled stage cached" in res.stdout
    for s in by_id(doc)[CPU]["stages"]:
        got = tmp_path / "cache" / s["stage"] / s["key"]
        assert (got / MANIFEST).read_bytes() == (Path(s["output"]) / MANIFEST).read_bytes()
        assert Manifest.read(got).problems(got, hashes=True) == []
    with in_repo():
        build = run("build", CPU, "--cache-dir", str(tmp_path / "cache"), "--json", "--quiet")
    assert {s["status"] for s in json.loads(build.stdout)["stages"]} == {"cached"}
    again = pull(home / "pub", "tiny-llama3.yaml", "--cache-dir", tmp_path / "cache", "--json")  # folder, file name
    assert {r["status"] for r in json.loads(again.stdout)["stages"]} == {"present"}


def test_memory_filesystem_round_trip(published, tmp_path):
    home, doc = published
    uri = f"memory://trtspec-test-{os.getpid()}/pub"
    stats = publish(Target(uri, create=True), doc["entries"])
    assert stats["uploaded"] > 0 and stats["index"] == f"{uri.replace('memory://', 'memory:///')}/{INDEX}"
    res = pull(f"{uri}/{INDEX}", GPU, "--cache-dir", tmp_path / "cache", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["stages"]
    assert [(r["stage"], r["status"]) for r in rows] == [("load", "restored"), ("checkpoint", "restored")]
    for r, s in zip(rows, by_id(doc)[GPU]["stages"]):
        got = Path(r["output"])
        assert (got / MANIFEST).read_bytes() == (Path(s["output"]) / MANIFEST).read_bytes()
        assert Manifest.read(got).problems(got, hashes=True) == []


def _largest_file(doc: dict, stage: str) -> tuple[str, dict]:
    s = next(s for s in by_id(doc)[CPU]["stages"] if s["stage"] == stage)
    return s["key"], max(Manifest.read(Path(s["output"])).outputs, key=lambda f: f["bytes"])


def test_a_corrupted_file_exits_2_naming_it_and_installs_nothing(published, tmp_path):
    home, doc = published
    pub = tmp_path / "pub"
    shutil.copytree(home / "pub", pub)
    key, f = _largest_file(doc, "export")
    blob = pub / blob_rel(f["sha256"])
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    blob.write_bytes(bytes(data))
    res = pull(pub / INDEX, CPU, "--cache-dir", tmp_path / "cache")
    assert res.exit_code == 2
    lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]  # the rest: progress
    assert len(lines) == 1 and f"export/{key}/{f['path']}" in lines[0] and "corrupted" in lines[0]
    assert not (tmp_path / "cache" / "export" / key).exists()
    assert not list((tmp_path / "cache").glob("*/.tmp-*"))
    assert (tmp_path / "cache" / "load").is_dir()  # the stages before it were whole and stay installed
    blob.write_bytes(bytes(data[: len(data) // 2]))  # truncated: also named
    assert f"export/{key}/{f['path']}" in pull(pub / INDEX, CPU, "--cache-dir", tmp_path / "cache").stderr


def test_an_interrupted_publish_resumes_fake_network_fault(published, monkeypatch):
    home, doc = published
    uri = f"memory://trtspec-test-{os.getpid()}/resume"
    t = Target(uri, create=True)
    real_mv, moved = t.fs.mv, []

    def flaky_mv(src, dst, *a, **kw):  # the "network" fails after three uploads
        if len(moved) == 3:
            raise ConnectionError("fake network fault")
        moved.append(dst)
        return real_mv(src, dst, *a, **kw)

    monkeypatch.setattr(t.fs, "mv", flaky_mv)
    with pytest.raises(ConnectionError):
        publish(t, doc["entries"])
    monkeypatch.undo()
    assert not t.fs.exists(t.path(INDEX))  # the index comes last: readers see nothing yet
    blobs = [p for p in moved if "/blobs/sha256/" in p]
    assert blobs and all(sha(t.fs.cat_file(p)) == p.rsplit("/", 1)[1] for p in blobs)  # what landed is whole
    stats = publish(Target(uri, create=True), doc["entries"])
    folders = [Path(s["output"]) for e in doc["entries"] for s in e["stages"]]
    distinct = {f["sha256"] for d in folders for f in Manifest.read(d).outputs} | {
        sha((d / MANIFEST).read_bytes()) for d in folders
    }
    assert stats["uploaded"] == len(distinct) - len(blobs)  # only what had not landed
    first = t.fs.cat_file(t.path(INDEX))
    monkeypatch.setattr(t.fs, "mv", lambda *a, **k: (_ for _ in ()).throw(ConnectionError("fake network fault")))
    with pytest.raises(ConnectionError):
        publish(t, doc["entries"])
    assert t.fs.cat_file(t.path(INDEX)) == first  # a failed publish leaves the previous index as it was


def test_pull_refuses_unknown_recipes_and_unsafe_indexes(published, tmp_path):
    home, _ = published
    res = pull(home / "pub", "recipes/nope.yaml", "--cache-dir", tmp_path / "cache")
    assert res.exit_code == 2 and f"allowed: {GPU}, {CPU}" in res.stderr
    assert pull(tmp_path / "nothing", CPU).exit_code == 2
    index = json.loads((home / "pub" / INDEX).read_text())
    index["recipes"][CPU]["stages"][0]["files"][0]["path"] = "../../escape"
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / INDEX).write_text(json.dumps(index))
    res = pull(tmp_path / "evil", CPU, "--cache-dir", tmp_path / "cache")
    assert res.exit_code == 2 and "unsafe" in res.stderr and not (tmp_path / "escape").exists()


def test_pull_refuses_an_entry_of_another_format_naming_the_rebuild(published, tmp_path, monkeypatch):
    """An entry published by another trtspec is refused at pull (`builder.handoffs.check_folder`): exit 2 naming the
    file, both formats and the rebuild command, and nothing of that stage installed. The other trtspec is a
    stand-in: this one reads export.json of one format more (monkeypatched) than the published entry holds."""
    from builder.handoffs import ExportJson

    home, doc = published
    built = ExportJson.FORMAT  # what the published entry holds
    monkeypatch.setattr(ExportJson, "FORMAT", built + 1)
    res = pull(home / "pub" / INDEX, CPU, "--cache-dir", tmp_path / "cache")
    assert res.exit_code == 2 and "Traceback" not in res.output
    key = next(s["key"] for s in by_id(doc)[CPU]["stages"] if s["stage"] == "export")
    (line,) = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert f"export.json: format {built}, this trtspec reads format {built + 1}: built by an older trtspec" in line
    assert "rebuild with `trtspec build " in line and "tiny-llama3.yaml --force`" in line
    assert not (tmp_path / "cache" / "export" / key).exists() and not list((tmp_path / "cache").glob("*/.tmp-*"))
    assert (tmp_path / "cache" / "load").is_dir()  # the stage before it holds no export.json: installed
