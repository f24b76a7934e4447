"""The float64-reference rule of tests/unit/numerics.py can fail: wrong results are rejected, right ones pass."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.unit.model_utils import TINY, hf_float64, hf_model, rope_table, torch_threads
from tests.unit.numerics import TRUSTED_ULPS, K, assert_close_to_float64, assert_near_tie, unit_roundoff

U = unit_roundoff(torch.float32)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    with torch_threads(1):
        yield


def _ref64() -> torch.Tensor:  # [70, 96] float64, max |.| = 6 exactly
    ref = torch.randn(70, 96, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return ref * (6.0 / ref.abs().max())


def _llama_f64(model, ids: torch.Tensor) -> torch.Tensor:  # [1, T] -> logits [1, T, V] float64
    """Llama written out in float64 from the HF state dict: a brute-force check of `hf_float64`."""
    c, sd = model.config, {k: v.double() for k, v in model.state_dict().items()}
    T, H, KV, D = ids.shape[1], c.num_attention_heads, c.num_key_value_heads, c.head_dim
    cos, sin = rope_table(model.model.rotary_emb.inv_freq, torch.arange(T)[None], torch.float64)

    def norm(x, w):
        return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps)

    def rope(x):  # (1, heads, T, D)
        x1, x2 = x.chunk(2, -1)
        return x * cos[:, None] + torch.cat((-x2, x1), -1) * sin[:, None]

    x = sd["model.embed_tokens.weight"][ids]  # (1, T, C)
    for i in range(c.num_hidden_layers):
        w = {k.removeprefix(f"model.layers.{i}."): v for k, v in sd.items() if k.startswith(f"model.layers.{i}.")}
        n = norm(x, w["input_layernorm.weight"])
        q = rope((n @ w["self_attn.q_proj.weight"].T).view(1, T, H, D).transpose(1, 2))  # (1, H, T, D)
        k = rope((n @ w["self_attn.k_proj.weight"].T).view(1, T, KV, D).transpose(1, 2)).repeat_interleave(H // KV, 1)
        v = (n @ w["self_attn.v_proj.weight"].T).view(1, T, KV, D).transpose(1, 2).repeat_interleave(H // KV, 1)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~torch.ones(T, T).tril().bool(), -math.inf)
        x = x + (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, T, H * D) @ w["self_attn.o_proj.weight"].T
        n = norm(x, w["post_attention_layernorm.weight"])
        gate, up = n @ w["mlp.gate_proj.weight"].T, n @ w["mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w["mlp.down_proj.weight"].T
    return norm(x, sd["model.norm.weight"]) @ sd.get("lm_head.weight", sd["model.embed_tokens.weight"]).T


@pytest.mark.parametrize("shape", sorted(TINY))
def test_hf_float64_is_float64_throughout(shape) -> None:
    """No fp32 island left in the reference: it is as close to a float64 brute force as float64 allows."""
    model = hf_model(seed=0, **TINY[shape])
    ids = torch.randint(0, 96, (1, 70), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, brute = hf_float64(model)(ids).logits, _llama_f64(model, ids)
        plain = copy.deepcopy(model).double()(ids).logits
    scale = float(brute.abs().max())
    assert float((ref - brute).abs().max()) <= TRUSTED_ULPS * unit_roundoff(torch.float64) * scale  # ~30 measured
    assert float((plain - brute).abs().max()) > U * scale  # plain `.double()` keeps HF's fp32 islands (~10 U)


def test_unit_roundoff_is_half_an_ulp_at_one() -> None:
    assert unit_roundoff(torch.float32) == 2.0**-24 and unit_roundoff(torch.bfloat16) == 2.0**-8


def test_bound_is_k_times_theirs() -> None:
    """theirs 20 u·scale off: ours (K - 1)x as far passes, (K + 1)x as far fails."""
    ref = _ref64()
    err = 20 * U * 6.0
    theirs = ref.clone()
    theirs[3, 4] += err
    ours = ref.clone()
    ours[10, 20] -= (K - 1) * err
    errors = assert_close_to_float64(ours, theirs, ref, what="within")
    assert errors.theirs == pytest.approx(err) and errors.bound == pytest.approx(K * err)
    ours[10, 20] = ref[10, 20] - (K + 1) * err
    with pytest.raises(AssertionError, match="too far from the float64 reference"):
        assert_close_to_float64(ours, theirs, ref, what="beyond")


def test_floor_when_theirs_is_exact() -> None:
    """theirs on the reference: the bound is K·u·scale, not zero; ours rounded to fp32 passes."""
    ref = _ref64()
    assert_close_to_float64(ref.float(), ref, ref, what="fp32 rounding only")
    ours = ref.clone()
    ours[0, 0] += (K + 1) * U * 6.0
    with pytest.raises(AssertionError, match="too far"):
        assert_close_to_float64(ours, ref, ref, what="beyond the floor")


def test_suspect_reference_is_refused() -> None:
    ref = _ref64()
    far = ref.clone()
    far[0, 0] += 2 * TRUSTED_ULPS * U * 6.0
    with pytest.raises(AssertionError, match="not the same computation"):
        assert_close_to_float64(ref, far, ref, what="theirs far off")
    with pytest.raises(TypeError, match="must be float64"):
        assert_close_to_float64(ref.float(), ref.float(), ref.float(), what="fp32 reference")
    with pytest.raises(ValueError, match="shape"):
        assert_close_to_float64(ref[:-1], ref, ref, what="shape")


def test_on_a_model_a_weight_off_in_its_4th_decimal_is_rejected() -> None:
    """HF eager (another fp32 route through the same math) passes; one q_proj weight + 1e-4 does not.

    That change moves the logits by ~3e-4, about 7x the bound (~4e-5 = 4 x HF's fp32 error).
    """
    model = hf_model(seed=0, **TINY["gqa_llama3_tied"])
    ids = torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(0))
    eager, off = copy.deepcopy(model), copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        off.model.layers[0].self_attn.q_proj.weight[0, 0] += 1e-4
        theirs, ref = model(ids).logits, hf_float64(model)(ids).logits
        assert_close_to_float64(eager(ids).logits, theirs, ref, what="HF eager")
        with pytest.raises(AssertionError, match="too far"):
            assert_close_to_float64(off(ids).logits, theirs, ref, what="one weight off by 1e-4")


def test_near_tie_excuses_only_a_tie() -> None:
    ref = torch.zeros(96, dtype=torch.float64)
    ref[7], ref[9], ref[11] = 5.0, 5.0 - 1e-7, 4.0  # 7 and 9 within fp32 noise of each other; 11 far below
    theirs = ref.float()
    with pytest.warns(UserWarning, match="near-tie"):
        assert_near_tie(9, 7, theirs, ref, what="tie")
    with pytest.raises(AssertionError, match="not a near-tie"):
        assert_near_tie(11, 7, theirs, ref, what="no tie")
