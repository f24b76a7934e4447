"""The rendered TensorRT-LLM repository served by the real tritonserver on the CPU.

preprocessing, postprocessing, the ensemble and tensorrt_llm_bls run for real, exactly as rendered. The
`tensorrt_llm` model (TensorRT-LLM's C++ backend on a GPU) is physically absent here: a test-only copy of
the repository replaces it with `fake_tensorrt_llm` (triton_repo/trtllm/models/fake_tensorrt_llm.py: a
CPU stand-in, no GPU, greedy decoding of the tiny fixture with its own KV-cache loop) under the same name
and config, `backend: "python"`. Oracles: the `tokenizers` library for ids and text, and HF transformers
`generate` (greedy) for the text the whole pipeline returns.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from builder.serve.server import TritonServer, free_ports
from tests.integration.conftest import grpc_inputs, stream_request
from triton_repo.config import parse, render
from triton_repo.trtllm import TrtllmRepoSettings, render_repository
from triton_repo.trtllm.render import MODELS_DIR

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/tiny-llama3/base"
MODEL = "tiny_trtllm"
PROMPTS = ["def fibonacci(n):", "import os\n", "class Stack:\n    def push(self, x):"]
MAX_TOKENS = 12


def fake_copy(repo: Path, dst: Path) -> Path:
    """A test-only copy whose tensorrt_llm is the fake (no GPU): same name, same tensors, backend python."""
    shutil.copytree(repo, dst)
    path = dst / "tensorrt_llm" / "config.pbtxt"
    cfg = parse(path.read_text())
    cfg.backend = "python"
    cfg.parameters["gpt_model_path"].string_value = str(FIXTURE)  # the fake reads an HF checkpoint
    path.write_text(render(cfg))
    shutil.copyfile(MODELS_DIR / "fake_tensorrt_llm.py", dst / "tensorrt_llm" / "1" / "model.py")
    return dst


def _serve(tmp: Path, **kw):
    """Render, copy with the fake, serve on free loopback ports; stopped (and checked gone) on exit."""
    s = TrtllmRepoSettings(engine_dir="/engines/tiny-llama3", model_name=MODEL, max_batch_size=4, **kw)
    render_repository(tmp / "repo", s, FIXTURE)
    server = TritonServer(fake_copy(tmp / "repo", tmp / "repo-fake-tensorrt-llm"), ports=free_ports())
    server.start()
    try:
        server.wait_ready(120)
        yield server
    finally:
        server.stop()
        assert server.processes() == []


# One server at a time (class scope): the two repositories need the same model names.
@pytest.fixture(scope="class")
def server(tmp_path_factory):
    """Decoupled (streaming); the BLS sends the whole text so far on each streamed response."""
    yield from _serve(tmp_path_factory.mktemp("trtllm"), decoupled=True, accumulate_tokens=True)


@pytest.fixture(scope="class")
def plain_server(tmp_path_factory):
    """Not decoupled: one response per request, plain gRPC infer."""
    yield from _serve(tmp_path_factory.mktemp("trtllm-plain"), decoupled=False)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(FIXTURE / "tokenizer.json"))


@pytest.fixture(scope="module")
def greedy():
    """prompt -> (prompt ids, new ids) from HF transformers generate (greedy), the oracle."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(FIXTURE))
    model = AutoModelForCausalLM.from_pretrained(str(FIXTURE), dtype=torch.float32).eval()
    out = {}
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.inference_mode():
            gen = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.eos_token_id,
            )
        out[p] = (ids[0].tolist(), gen[0, ids.shape[1] :].tolist())
    return out


def infer(server, model: str, values: dict, outputs: list[str]) -> dict:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.endpoints["grpc"])
    try:
        res = client.infer(model, grpc_inputs(values), outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    finally:
        client.close()
    return {o: res.as_numpy(o) for o in outputs}


def word_ids_oracle(rows: list[list[str]], tokenizer) -> np.ndarray:
    """Upstream's word-list format (preprocessing/1/model.py `_to_word_list_format` @ 01259b15), brute force:
    [B, 2, P]: the words' ids back to back (padded with 0), each word's end offset (padded with -1)."""
    flat = [[t for w in r for t in tokenizer.encode(w, add_special_tokens=False).ids] for r in rows]
    ends = [list(np.cumsum([len(tokenizer.encode(w, add_special_tokens=False).ids) for w in r])) for r in rows]
    width = max(1, max(len(f) for f in flat))
    return np.array([[f + [0] * (width - len(f)), e + [-1] * (width - len(e))] for f, e in zip(flat, ends)], np.int32)


def _request(prompt: str, stream: bool, **extra) -> dict:
    values = {
        "text_input": np.array([[prompt]], dtype=object),
        "max_tokens": np.array([[MAX_TOKENS]], np.int32),
        "stream": np.array([[stream]]),
    }
    values.update({k: np.array([[v]]) for k, v in extra.items()})
    return values


class TestDecoupled:
    """The rendered repository as is (decoupled), tensorrt_llm replaced by the fake."""

    def test_preprocessing_ids_equal_the_tokenizer(self, server, tokenizer):
        queries = ["def add(a, b):\n    return a + b", "x"]
        stops = [["\n\n", "return"], ["def", ""]]
        values = {
            "QUERY": np.array([[q] for q in queries], dtype=object),
            "REQUEST_OUTPUT_LEN": np.array([[5], [7]], np.int32),
            "STOP_WORDS_DICT": np.array(stops, dtype=object),
        }
        names = [
            "INPUT_ID",
            "REQUEST_INPUT_LEN",
            "REQUEST_OUTPUT_LEN",
            "STOP_WORDS_IDS",
            "BAD_WORDS_IDS",
            "OUT_END_ID",
            "OUT_PAD_ID",
        ]
        got = infer(server, "preprocessing", values, names)
        want = [tokenizer.encode(q).ids for q in queries]  # with the post-processor's BOS, as add_special_tokens
        assert want[0][0] == tokenizer.token_to_id("<|begin_of_text|>")
        eos = tokenizer.token_to_id("<|end_of_text|>")
        assert got["REQUEST_INPUT_LEN"].tolist() == [[len(w)] for w in want]
        width = max(len(w) for w in want)
        assert got["INPUT_ID"].tolist() == [w + [eos] * (width - len(w)) for w in want]  # eos pads (no pad token)
        assert got["REQUEST_OUTPUT_LEN"].tolist() == [[5], [7]]
        want_stops = word_ids_oracle([[w for w in r if w] for r in stops], tokenizer)
        np.testing.assert_array_equal(got["STOP_WORDS_IDS"], want_stops)
        assert got["BAD_WORDS_IDS"].shape == (2, 2, 0)
        assert got["OUT_END_ID"].tolist() == [[eos], [eos]] and got["OUT_PAD_ID"].tolist() == [[eos], [eos]]

    def test_postprocessing_decodes_up_to_each_length(self, server, tokenizer):
        ids = tokenizer.encode("for i in range(10):\n    print(i)").ids
        tokens = np.array([[ids], [ids]], np.int32)  # (B=2, beams=1, T)
        lengths = np.array([[len(ids)], [5]], np.int32)
        got = infer(server, "postprocessing", {"TOKENS_BATCH": tokens, "SEQUENCE_LENGTH": lengths}, ["OUTPUT"])
        want = [tokenizer.decode(ids, skip_special_tokens=True), tokenizer.decode(ids[:5], skip_special_tokens=True)]
        assert [v.decode() for v in got["OUTPUT"].reshape(-1)] == want

    @pytest.mark.parametrize("model", [MODEL, "tensorrt_llm_bls"])
    def test_pipeline_with_fake_tensorrt_llm_equals_hf_greedy(self, server, tokenizer, greedy, model):
        for prompt in PROMPTS:
            prompt_ids, new = greedy[prompt]
            want = tokenizer.decode(new, skip_special_tokens=True)
            whole = stream_request(server, model, _request(prompt, stream=False))
            assert whole.error is None and whole.text == want, (model, prompt)
            steps = stream_request(server, model, _request(prompt, stream=True))
            assert steps.error is None and len(steps.texts) == len(new), (model, prompt)  # one response per token
            if model == MODEL:  # the ensemble streams each step's text
                assert steps.text == want, prompt
            else:  # accumulate_tokens: each response holds the text so far
                so_far = [tokenizer.decode(new[:i], skip_special_tokens=True) for i in range(1, len(new) + 1)]
                assert steps.texts == so_far
        prompt_ids, new = greedy[PROMPTS[0]]
        full = stream_request(server, model, _request(PROMPTS[0], stream=False, exclude_input_in_output=False))
        assert full.error is None and full.text == tokenizer.decode(prompt_ids + new, skip_special_tokens=True)

    def test_bls_refuses_what_it_does_not_implement(self, server):
        values = _request(PROMPTS[0], stream=False)
        values["num_draft_tokens"] = np.array([[3]], np.int32)
        got = stream_request(server, "tensorrt_llm_bls", values)
        assert got.error is not None and "num_draft_tokens" in got.error
        assert stream_request(server, "tensorrt_llm_bls", _request(PROMPTS[1], stream=False)).error is None


class TestNotDecoupled:
    """The same repository rendered with decoupled: false."""

    @pytest.mark.parametrize("model", [MODEL, "tensorrt_llm_bls"])
    def test_not_decoupled_repository_answers_plain_infer(self, plain_server, tokenizer, greedy, model):
        for prompt in PROMPTS[:2]:
            got = infer(plain_server, model, _request(prompt, stream=False), ["text_output"])["text_output"]
            want = tokenizer.decode(greedy[prompt][1], skip_special_tokens=True)
            assert [v.decode() for v in got.reshape(-1)] == [want]
