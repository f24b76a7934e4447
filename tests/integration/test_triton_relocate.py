"""A trtspec repository is relocatable: built, copied out of the build cache, MOVED to another folder under
another name (the first copy then deleted), and served from there by a real tritonserver, it answers exactly
like `trtspec generate`; its configs hold no absolute path (none of the build host's, none of its virtual
environment's), and spec_decoder reports that its code came from the moved repository's own runtime.

The moved repository is served by `TritonServer` as `trtspec serve` runs it: the stub's environment supplies
the third-party packages only (`builder.serve.server.stub_python`).
"""

from __future__ import annotations

import os
import shutil
import urllib.request

import numpy as np
import pytest

from tests.integration.conftest import build_repo, http_generate, oracle, stream_request

RECIPE = "recipes/tiny-llama3-eagle2.yaml"  # the repository test_triton_serve serves (a cache hit there)
MODEL = "tiny_llama3"
PROMPTS = {"def fibonacci(n):": 24, "class Stack:\n    def push(self, x):": 17, "raise ValueError(": 9}


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    built = build_repo(RECIPE)
    first = tmp_path_factory.mktemp("built-here") / "repo"
    shutil.copytree(built, first)  # the cached repository stays as it is
    there = tmp_path_factory.mktemp("served-from-here") / "renamed-repository"  # (no spaces: see test_triton_serve_cli)
    os.rename(first, there)  # a move, not a copy
    shutil.rmtree(first.parent)
    return there


@pytest.fixture(scope="module")
def server(serve, moved):
    return serve(moved)


def test_no_config_names_an_absolute_path(moved):
    from triton_repo.config import parameters, parse
    from triton_repo.runtime import absolute_paths

    configs = sorted(moved.glob("*/config.pbtxt"))
    assert len(configs) == 4
    texts = [c.read_text(encoding="utf-8") for c in configs]
    assert absolute_paths(texts) == []
    for text in texts:
        assert "python_paths" not in parameters(parse(text)) and "site-packages" not in text
    # what the models read besides their configs: the bootstrap, the runtime's manifest, the repository's record
    read = [*moved.glob("*/1/model.py"), *moved.glob("*/1/trtspec_runtime/runtime.json"), moved / "trtspec-repo.json"]
    assert len(read) == 9 and absolute_paths(p.read_text(encoding="utf-8") for p in read) == []


def test_the_moved_repository_answers_like_trtspec_generate(server):
    for prompt, n in PROMPTS.items():
        want = oracle(RECIPE, prompt, n)
        status, body = http_generate(server, MODEL, {"text_input": prompt, "max_tokens": n})
        assert status == 200, body
        assert body["text_output"] == want["text"] and body["output_tokens"] == len(want["token_ids"])
        assert body["steps"] == want["steps"] and body["finish_reason"] == want["finish_reason"]
    prompt, n = next(iter(PROMPTS.items()))
    got = stream_request(
        server, MODEL, {"text_input": [prompt], "max_tokens": np.array([n], np.int32), "stream": np.array([True])}
    )
    assert got.error is None and got.text == oracle(RECIPE, prompt, n)["text"] and len(got.texts) > 1


def test_every_model_runs_the_code_the_repository_carries(server, moved):
    for name in (MODEL, "preprocessing", "spec_decoder", "postprocessing"):
        with urllib.request.urlopen(f"http://{server.endpoints['http']}/v2/models/{name}/ready") as r:
            assert r.status == 200
    log = server.log_path.read_text(encoding="utf-8", errors="replace")
    runtime = moved.resolve() / "spec_decoder" / "1" / "trtspec_runtime"
    assert f"code from {runtime}" in log, log[-3000:]
