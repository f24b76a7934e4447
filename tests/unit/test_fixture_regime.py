"""The regime fixture (devtools/fixture/regime.py): the tiny fixture inflated into a memory-bound regime
without changing its function.

Oracles: the source fixture under HF transformers (fp32, and float64 as the exact reference:
tests/unit/numerics.py), HF greedy decoding, the issue's byte targets as data (issue 15, item 1:
target step ≥ 4 × a 32 MiB last-level cache, EAGLE layer + LM head ≈ 10 %, Medusa heads ≤ 15 %)
checked against the architecture's arithmetic, and the tiny fixture's own acceptance (same function,
same drafters → same accepted tokens per step). ONNX Runtime GenAI (the benchmark's peer) is checked
when installed, skipped with the reason otherwise.

Default run: 3 HumanEval prompts × 32 new tokens per method (engines built into a temp cache removed
at the end); the `slow` test runs 20 × 64.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from builder.errors import UserError
from devtools.fixture.inflate import InflateSpec, check_spec, layer_positions, widths_of, zero_tensors
from devtools.fixture.regime import LLC_BYTES, OUT, SOURCE, ensure_regime_fixture, make_regime_fixture
from tests.unit.model_utils import hf_float64
from tests.unit.numerics import assert_close_to_float64, unit_roundoff
from tests.unit.test_lossless import assert_lossless

REPO = Path(__file__).resolve().parents[2]
PROMPTS, NEW = 3, 32
METHODS = ("none", "lookahead", "medusa", "eagle1", "eagle2")
TINY_RECIPES = {
    "none": "tiny-llama3-none.yaml",
    "lookahead": "tiny-llama3-lookahead.yaml",
    "medusa": "tiny-llama3-medusa.yaml",
    "eagle1": "tiny-llama3-eagle1.yaml",
    "eagle2": "tiny-llama3-eagle2.yaml",
}


@pytest.fixture(scope="module")
def record() -> dict:
    """The fixture as scripts/setup.sh makes it (a hash check when it is up to date; remade if stale)."""
    return ensure_regime_fixture()[0]


@pytest.fixture(scope="module")
def cache():
    """Engines and peer conversions of this module: ~2 GB, removed at the end of the module."""
    folder = Path(tempfile.mkdtemp(prefix="regime-test-cache-"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRTSPEC_CACHE_DIR", str(folder))  # where devtools.bench.peers converts
        yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def prompts(record) -> list[list[int]]:
    from builder.data.humaneval import heldout_prompts
    from builder.stages.decoders import load_tokenizer

    tok = load_tokenizer(OUT / "base")
    return [tok.encode(p).ids for p in heldout_prompts(PROMPTS)]


def _hf(path: Path):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()


@pytest.fixture(scope="module")
def hf(record):
    """(tiny fp32, tiny float64, regime fp32): the source under HF is the oracle."""
    tiny = _hf(SOURCE / "base")
    return tiny, hf_float64(tiny), _hf(OUT / "base")


@pytest.fixture(scope="module")
def hf_greedy(hf, prompts) -> list[list[int]]:
    """HF greedy on the regime fixture (eos off): the reference every engine must reproduce."""
    model = hf[2]
    outs = []
    for p in prompts:
        x = torch.tensor([p])
        with torch.no_grad():
            y = model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=NEW, do_sample=False, eos_token_id=None
            )
        outs.append(y[0, len(p) :].tolist())
    return outs


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "regime.json"
    }


# -- the files ----------------------------------------------------------------------------------------


def test_setup_fixture_is_current_and_remaking_it_is_bit_identical(record, tmp_path):
    again = make_regime_fixture(SOURCE, tmp_path / "again", InflateSpec())
    assert again["key"] == record["key"]
    made = {k: v for k, v in _digests(OUT).items() if not k.startswith("eagle3/")}  # (eagle3/: `trtspec
    assert _digests(tmp_path / "again") == made  # train-draft`'s draft of this target, on demand, not the factory's)
    assert ensure_regime_fixture(SOURCE, tmp_path / "again")[1] is False  # idempotent: nothing remade


def test_byte_budget_meets_the_issue_targets(record):
    """The record's figures equal the architecture's arithmetic, and meet issue 15's targets."""
    cfg = json.loads((OUT / "base" / "config.json").read_text())
    ecfg = json.loads((OUT / "eagle" / "config.json").read_text())
    C, V, L, I = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
    H, KV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def layer(norms: int) -> int:  # q, k, v, o, gate, up, down + RMSNorm weights
        return C * H * D * 2 + C * KV * D * 2 + 3 * C * I + norms * C

    target = 4 * (L * layer(2) + C + V * C + C)  # layers, final norm, LM head, one embedding row
    eagle = 4 * (2 * C * C + C + ecfg["num_hidden_layers"] * layer(1) + V * C + C)  # fc(+bias), layer, LM head, row
    medusa = 4 * 5 * (C * C + C + V * C)  # 5 heads: ResBlock linear(+bias), vocabulary projection
    b = record["budget"]
    assert (b["target_step_bytes"], b["eagle_level_bytes"], b["medusa_bytes"]) == (target, eagle, medusa)
    assert target >= 4 * LLC_BYTES == 4 * 32 * 2**20  # T=1 streams ≥ 4× the issue's AVX2 L3 (32 MiB)
    assert 0.08 <= eagle / target <= 0.12  # ≈ 10 %, Llama 3 8B's draft share
    assert medusa / target <= 0.15
    assert H // KV == 4 and I == 3.5 * H * D  # GQA 4:1, intermediate 3.5 × the attention width (as 8B)


def test_source_weights_sit_unchanged_and_no_tensor_is_all_zero(record):
    from safetensors.numpy import load_file

    src, out = load_file(SOURCE / "base" / "model.safetensors"), load_file(OUT / "base" / "model.safetensors")
    eagle = load_file(OUT / "eagle" / "model.safetensors")
    assert zero_tensors(out) == [] and zero_tensors(eagle) == []
    for k in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        np.testing.assert_array_equal(out[k], src[k])
    for i, pos in enumerate(layer_positions(4, record["spec"]["num_layers"])):
        for name in (
            "self_attn.q_proj.weight",
            "self_attn.o_proj.weight",
            "mlp.down_proj.weight",
            "mlp.up_proj.weight",
            "input_layernorm.weight",
        ):
            s = src[f"model.layers.{i}.{name}"]
            block = out[f"model.layers.{pos}.{name}"][tuple(slice(0, n) for n in s.shape)]
            np.testing.assert_array_equal(block, s, err_msg=f"layer {i} → {pos}: {name}")


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(num_heads=30), "num_heads"),  # not 4 query heads per KV head: source heads would change KV head
        (dict(num_heads=32, num_kv_heads=16), "num_heads"),
        (dict(intermediate_size=100), "intermediate_size"),
        (dict(num_layers=2), "num_layers"),
    ],
)
def test_spec_that_would_change_the_function_is_refused(bad, field):
    cfg = json.loads((SOURCE / "base" / "config.json").read_text())
    with pytest.raises(UserError) as err:
        check_spec(widths_of(cfg), InflateSpec(**bad), cfg["num_hidden_layers"])
    assert err.value.field == field and err.value.allowed


def test_bench_and_run_know_both_fixtures_by_name():
    """scripts/bench_decode.py resolves fixture and recipe names: every fixture's set is CPU recipes on one
    checkpoint covering Lookahead, EAGLE-3, EAGLE-2, EAGLE-1, Medusa and n-gram (plain decoding comes from the first)."""
    from builder.recipe.loader import load_recipe
    from devtools.bench.decode import FIXTURES, resolve_recipes

    for name in FIXTURES:
        loaded = [load_recipe(p) for p in resolve_recipes([name], REPO / "recipes")]
        assert {r.recipe.target.device for r in loaded} == {"cpu"}
        assert len({r.recipe.model.checkpoint for r in loaded}) == 1
        spec = [r.recipe.speculative for r in loaded]
        assert [(s.method, getattr(s, "version", None)) for s in spec] == [
            ("lookahead", None),
            ("eagle3", None),
            ("eagle", 2),
            ("eagle", 1),
            ("medusa", None),
            ("ngram", None),
        ]
    assert resolve_recipes(["regime-llama3-none"], REPO / "recipes") == [REPO / "recipes" / "regime-llama3-none.yaml"]
    with pytest.raises(UserError) as err:
        resolve_recipes(["regime-llama4"], REPO / "recipes")
    assert "regime-llama3" in err.value.allowed


# -- the function: HF oracle ---------------------------------------------------------------------------


def test_logits_and_hidden_states_equal_the_source(hf, prompts):
    """fp32: within the bound of fp32 rounding (judged against the source in float64); float64: the
    inflated model is the source's function to float64 rounding (zero blocks add exact zeros)."""
    tiny, tiny64, big = hf
    big64 = hf_float64(big)
    for i, p in enumerate(prompts):
        x = torch.tensor([p])
        with torch.no_grad():
            ref, ref64, out, out64 = (m(x, output_hidden_states=True) for m in (tiny, tiny64, big, big64))
        assert_close_to_float64(out.logits, ref.logits, ref64.logits, what=f"prompt {i} logits")
        assert_close_to_float64(
            out.hidden_states[-1],
            ref.hidden_states[-1],
            ref64.hidden_states[-1],
            what=f"prompt {i} final hidden state (what the drafters read)",
        )
        scale = float(ref64.logits.abs().max())
        assert float((out64.logits - ref64.logits).abs().max()) <= 2**10 * unit_roundoff(torch.float64) * scale


def test_a_nonzero_in_a_zero_block_changes_the_function(hf, prompts):
    """The check above can fail: one entry of an extra layer's zero o_proj columns set to 0.01 moves the
    logits far past the fp32 bound (so the zeros, not luck, preserve the function)."""
    tiny, tiny64, big = hf
    layers = big.config.num_hidden_layers
    extra = next(p for p in range(layers) if p not in layer_positions(4, layers))  # an extra layer
    o = big.model.layers[extra].self_attn.o_proj.weight  # [C, H·D]
    col = int(torch.nonzero(o.abs().sum(0) == 0)[0])
    x = torch.tensor([prompts[0]])
    with torch.no_grad():
        o[0, col] = 0.01
        try:
            moved = big(x).logits
        finally:
            o[0, col] = 0.0
        ref, ref64 = tiny(x).logits, tiny64(x).logits
    with pytest.raises(AssertionError, match="too far"):
        assert_close_to_float64(moved, ref, ref64, what="perturbed")


def test_hf_greedy_equals_the_source(hf, prompts, hf_greedy):
    tiny, tiny64, _ = hf
    for p, ours in zip(prompts, hf_greedy):
        x = torch.tensor([p])
        with torch.no_grad():
            ref = tiny.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=NEW, do_sample=False, eos_token_id=None
            )[0, len(p) :].tolist()
        assert_lossless((tiny, tiny64), p, ref, ours, "regime HF greedy vs tiny HF greedy")


# -- our engines: every method lossless, acceptance of the tiny fixture ---------------------------------


def _runs(recipe: str, prompts: list[list[int]], cache: Path, new: int = NEW, overrides: tuple[str, ...] = ()):
    from builder.recipe.loader import load_recipe
    from builder.speculative.decoding import generate
    from builder.stages.decoders import build_decoder

    dec = build_decoder(load_recipe(REPO / "recipes" / recipe, overrides), engine="onnxruntime", cache=cache)
    return [generate(dec.engine, p, new, dec.make_drafter()) for p in prompts]


def _same_tree(recipe: str) -> tuple[str, ...]:
    """The overrides that give a tiny recipe the regime recipe's draft (the regime recipes carry tuned trees and
    calibrate on HumanEval)."""
    import json

    from builder.recipe.loader import load_recipe

    regime = load_recipe(REPO / "recipes" / recipe).recipe
    spec = regime.speculative.model_dump(mode="json")
    keys = ("tree", "window", "ngram", "verification_set")  # (a tree; Lookahead's W, N, G)
    # and the calibration text, which a draft vocabulary (`speculative.draft_vocab`) is counted on
    source = f"quantization.calibration.source={regime.quantization.calibration.source}"
    return (source, *(f"speculative.{k}={json.dumps(spec[k])}" for k in keys if k in spec))


@pytest.mark.parametrize("method", METHODS)
def test_method_is_lossless_and_accepts_as_on_the_tiny_fixture(method, hf, prompts, hf_greedy, cache):
    """Same function, same drafters: emitted tokens == HF greedy, and the accepted draft tokens per step
    equal the tiny fixture's (a difference would need a draft near-tie at fp32 rounding level)."""
    tiny, tiny64, _ = hf
    regime = _runs(f"regime-llama3-{method}.yaml", prompts, cache)
    small = _runs(TINY_RECIPES[method], prompts, cache, overrides=_same_tree(f"regime-llama3-{method}.yaml"))
    for p, ref, g in zip(prompts, hf_greedy, regime):
        assert_lossless((tiny, tiny64), p, ref, g.token_ids, f"regime {method}")
    assert [g.accepted_per_step for g in regime] == [g.accepted_per_step for g in small]
    if method != "none":
        tau = sum(len(g.token_ids) - 1 for g in regime) / sum(g.steps for g in regime)
        assert tau > 1.2, f"{method}: τ = {tau:.2f}, the drafts barely accept"


def _optimised_float_elements(model: Path, out: Path) -> tuple[int, dict[str, int]]:
    """Float initializer elements and op counts of the graph ONNX Runtime runs (ORT_ENABLE_ALL, dumped)."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 3
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", out.name + ".data")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    m = onnx.load(str(out), load_external_data=False)
    ops: dict[str, int] = {}
    for node in m.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    floats = sum(int(np.prod(t.dims)) for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT)
    return floats, ops


def _base_params() -> int:
    from safetensors import safe_open

    with safe_open(str(OUT / "base" / "model.safetensors"), "np") as f:
        return sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())


def test_ort_optimisation_keeps_every_weight_of_our_graph(record, cache, tmp_path):
    """No zero block is folded away: the optimised target graph still holds every weight, 13 attentions."""
    from builder.recipe.loader import load_recipe
    from builder.stages.runner import build

    folder = build(load_recipe(REPO / "recipes" / "regime-llama3-none.yaml"), cache, until="engine").folder("engine")
    graph = next((folder / "target-greedy").glob("*.onnx"))
    floats, ops = _optimised_float_elements(graph, tmp_path / "opt.onnx")
    assert floats >= _base_params()
    assert ops.get("Attention", 0) + ops.get("GroupQueryAttention", 0) == record["spec"]["num_layers"]


def test_ortgenai_converts_keeps_every_weight_and_decodes_like_hf(record, cache, prompts, hf_greedy, tmp_path):
    pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the benchmark's peer) is not installed")
    from devtools.bench import peers

    peer = peers.ortgenai_peer(OUT / "base", threads=1)
    floats, ops = _optimised_float_elements(Path(peer.info["model_dir"]) / "model.onnx", tmp_path / "opt.onnx")
    assert floats >= _base_params()
    assert ops.get("GroupQueryAttention", 0) == record["spec"]["num_layers"]
    for p, ref in zip(prompts[:2], hf_greedy):
        assert peer.generate(p, 16).tokens == ref[:16]


@pytest.mark.slow
def test_every_method_is_lossless_long(hf, cache):
    """20 HumanEval prompts × 64 new tokens, every method, against plain greedy of our engine checked
    against HF on the same prompts."""
    from builder.data.humaneval import heldout_prompts
    from builder.stages.decoders import load_tokenizer

    tok = load_tokenizer(OUT / "base")
    long_prompts = [tok.encode(p).ids for p in heldout_prompts(20)]
    tiny, tiny64, big = hf
    plain = _runs("regime-llama3-none.yaml", long_prompts, cache, new=64)
    for p, g in zip(long_prompts, plain):
        x = torch.tensor([p])
        with torch.no_grad():
            ref = big.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=64, do_sample=False, eos_token_id=None
            )[0, len(p) :].tolist()
        assert_lossless((tiny, tiny64), p, ref, g.token_ids, "regime plain vs HF")
    for method in METHODS[1:]:
        for p, base, g in zip(long_prompts, plain, _runs(f"regime-llama3-{method}.yaml", long_prompts, cache, new=64)):
            assert_lossless((tiny, tiny64), p, base.token_ids, g.token_ids, f"regime {method} (long)")
