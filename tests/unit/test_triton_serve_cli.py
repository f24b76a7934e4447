"""`trtspec serve` refuses what it cannot serve with exit 2 and one precise line (CliRunner; no server)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from builder.cli import cli


def test_a_folder_that_is_no_trtspec_repository(tmp_path):
    res = CliRunner().invoke(cli, ["serve", str(tmp_path)])
    assert res.exit_code == 2
    assert "not a trtspec model repository" in res.output


def test_a_repository_whose_python_paths_are_gone(tmp_path):
    import pytest

    pytest.importorskip("tritonclient.grpc")
    from triton_repo.config import Settings, all_configs, render

    s = Settings(model_name="m", python_paths=(str(tmp_path / "gone"),))
    for name, cfg in all_configs(s).items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text(render(cfg))
    (tmp_path / "trtspec-repo.json").write_text(json.dumps({"ensemble": "m", "models": list(all_configs(s))}))
    res = CliRunner().invoke(cli, ["serve", str(tmp_path)])
    assert res.exit_code == 2
    assert "no longer exist" in res.output and "gone" in res.output


def test_help_lists_serve():
    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0 and "serve" in res.output
    res = CliRunner().invoke(cli, ["serve", "--help"])
    assert res.exit_code == 0 and "--host" in res.output and "--grpc-port" in res.output
