"""`trtspec serve` refuses what it cannot serve with exit 2 and one precise line (CliRunner; no server)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from builder.cli import cli


def test_a_folder_that_is_no_trtspec_repository(tmp_path):
    res = CliRunner().invoke(cli, ["serve", str(tmp_path)])
    assert res.exit_code == 2
    assert "not a trtspec model repository" in res.output


def _emitted(tmp_path):
    """A repository emitted around a minimal ONNX Runtime engine folder (engine.json + tokenizer: all emit reads)."""
    import pytest

    pytest.importorskip("tritonclient.grpc")
    from triton_repo.config import RepositorySettings
    from triton_repo.emit import emit

    engine = tmp_path / "engine"
    engine.mkdir(parents=True)
    (engine / "engine.json").write_text(
        json.dumps(
            {
                "format": 1,
                "backend": "onnxruntime",
                "tokenizer": "tokenizer.json",
                "drafter": {"method": "none"},
                "versions": {},
            }
        )
    )
    (engine / "tokenizer.json").write_text("{}")
    repo = tmp_path / "repo"
    emit(repo, engine, RepositorySettings(model_name="m"))
    return repo


def test_a_repository_whose_runtime_was_edited_or_lost_a_file(tmp_path):
    repo = _emitted(tmp_path)
    edited = repo / "spec_decoder" / "1" / "trtspec_runtime" / "triton_repo" / "scheduler.py"
    edited.unlink()  # (a hard link shared with the other models: replace it, do not write through it)
    edited.write_text("# edited\n")
    (repo / "m" / "1" / "trtspec_runtime" / "builder" / "speculative" / "decoding.py").unlink()
    res = CliRunner().invoke(cli, ["serve", str(repo)])
    assert res.exit_code == 2
    assert "runtime is incomplete or was edited" in res.output
    assert "spec_decoder/1/trtspec_runtime/triton_repo/scheduler.py: changed" in res.output
    assert "m/1/trtspec_runtime/builder/speculative/decoding.py: missing" in res.output


def test_serving_a_recipe_warns_when_the_cached_repository_runs_other_code(tmp_path, capsys):
    """The repo stage's cache key may miss a change of the copied code; `trtspec serve RECIPE` then says so."""
    from builder.commands.serve_cmds import warn_stale

    repo = _emitted(tmp_path)
    warn_stale(repo)
    assert capsys.readouterr().err == ""
    manifest = repo / "m" / "1" / "trtspec_runtime" / "runtime.json"
    data = json.loads(manifest.read_text())
    data["files"]["triton_repo/scheduler.py"] = "0" * 64  # as if emitted from an older scheduler.py
    manifest.unlink()
    manifest.write_text(json.dumps(data))
    warn_stale(repo)
    err = capsys.readouterr().err
    assert "runs other code than this source tree (triton_repo/scheduler.py: changed in the source tree)" in err
    assert "--force" in err


def test_a_repository_path_the_python_backend_would_split_is_refused_before_starting(tmp_path):
    """Triton's Python backend launches each stub with `bash -c` and the model path unquoted (python_backend
    src/stub_launcher.cc): a path with a space ends every stub with `stol` (seen with Triton 2.51 here)."""
    import pytest

    from builder.serve.server import ServerError, TritonServer

    repo = _emitted(tmp_path / "a b")
    server = TritonServer(repo)
    with pytest.raises(ServerError, match="holds ' '.*stub_launcher.cc"):
        server.start()
    assert server.proc is None and server.processes() == []
    res = CliRunner().invoke(cli, ["serve", str(repo)])
    assert res.exit_code == 2 and "bash -c" in res.output


def test_help_lists_serve():
    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0 and "serve" in res.output
    res = CliRunner().invoke(cli, ["serve", "--help"])
    assert res.exit_code == 0 and "--host" in res.output and "--grpc-port" in res.output
