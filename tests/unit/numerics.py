"""Judging a low-precision result against HF with a float64 reference, not a fixed atol (STYLE §15).

A fixed `atol` records what one machine's SIMD path produced, not what fp32 arithmetic allows: the
summation order changes with the vector width (ATEN_CPU_CAPABILITY=default|avx2|avx512), and 1e-5,
picked on one path, failed on another (1.2e-5 with AVX-512). The rule here picks no number from a run:

1. `ref64`: the same weights run in float64 (`model_utils.hf_float64`, no fp32 islands left): the
   exact math to ~30 float64 ulps of the scale, far below any fp32 error.
2. err(x) = max |x - ref64| for ours and for HF's result in the same dtype ("theirs"), both measured
   here, on this machine's SIMD path.
3. Ours passes iff  err(ours) <= K * max(err(theirs), u * scale),  scale = max |ref64|, u the unit
   roundoff of the compute dtype (2**-24 for fp32, 2**-8 for bf16).

Why it separates right from wrong: two implementations of the same math in the same dtype round
differently (summation order, kernels) but by about the same amount, so err(ours) / err(theirs) stays
near 1 (0.67-1.84 measured over every comparison in these tests, fp32 and bf16, on all three SIMD
paths). A different formula (a RoPE band off, eps in the wrong place, one weight off in its 4th
decimal) moves the result by far more than rounding does (rms eps x10: ratio > 2000; one q_proj weight
+1e-4: ratio ~30). K = 4 leaves room on both sides. The floor u * scale (half an ulp of the largest
value) keeps the bound meaningful when theirs lands (almost) exactly on the reference. max |ref64|
stands in for the magnitude of the terms summed: errors of sums are relative to it, not to each
(possibly near-zero) element, so no per-element rtol.

The bound scales with err(theirs), so a wrong reference (other weights, another input) would make it
vacuous. A guard rules that out: theirs must itself lie within TRUSTED_ULPS = 1024 units of roundoff
of the scale (HF measures 1-43 on the tiny models, the fixture and the drafters), and ref64 must be
float64.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import torch

K = 4.0  # ours may be at most K times as far from ref64 as theirs (measured ratio 0.67-1.84)
TRUSTED_ULPS = 2.0**10  # theirs beyond this many u * scale from ref64: the reference is suspect

log = logging.getLogger(__name__)


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = half the spacing of floats at 1.0: 2**-24 for fp32, 2**-8 for bf16, 2**-53 for float64."""
    return torch.finfo(dtype).eps / 2


@dataclass(frozen=True)
class Errors:
    """Measured errors against ref64 and the bound ours had to meet (all absolute, in value units)."""

    ours: float  # max |ours - ref64|
    theirs: float  # max |theirs - ref64|
    scale: float  # max |ref64|
    bound: float  # K * max(theirs, u * scale)

    def __str__(self) -> str:
        return (
            f"ours {self.ours:.2e}, theirs {self.theirs:.2e}, bound {self.bound:.2e} "
            f"(scale {self.scale:.3g}, ours/theirs {self.ours / max(self.theirs, 1e-300):.2f})"
        )


def error_bound(
    theirs: torch.Tensor,  # [...] computed in `dtype` (any float dtype on return)
    ref64: torch.Tensor,  # [...] float64, same shape
    *,
    what: str,
    dtype: torch.dtype = torch.float32,
) -> tuple[float, float, float]:  # -> (err(theirs), scale, bound) as in the module docstring
    """Check the reference (float64, same shape, theirs within TRUSTED_ULPS) and return the bound."""
    if ref64.dtype != torch.float64:
        raise TypeError(f"{what}: the reference must be float64, got {ref64.dtype}")
    if theirs.shape != ref64.shape:
        raise ValueError(f"{what}: theirs has shape {tuple(theirs.shape)}, the reference {tuple(ref64.shape)}")
    u, scale = unit_roundoff(dtype), float(ref64.abs().max())
    err_theirs = float((theirs.double() - ref64).abs().max())
    if err_theirs > TRUSTED_ULPS * u * scale:
        raise AssertionError(
            f"{what}: theirs is {err_theirs:.2e} from the float64 reference, over "
            f"{TRUSTED_ULPS:.0f} units of roundoff of the scale {scale:.3g}: not the same computation"
        )
    return err_theirs, scale, K * max(err_theirs, u * scale)


def assert_close_to_float64(
    ours: torch.Tensor,  # [...] computed in `dtype` (returned in any float dtype)
    theirs: torch.Tensor,  # [...] HF's result in `dtype`, same shape
    ref64: torch.Tensor,  # [...] float64 reference, same shape
    *,
    what: str,
    dtype: torch.dtype = torch.float32,
) -> Errors:
    """Assert err(ours) <= K * max(err(theirs), u * scale) (module docstring); return the errors.

    `dtype` is the precision ours and theirs were computed in (ours may come back upcast, e.g. bf16
    logits returned as fp32). Errors are logged at INFO (`--log-cli-level=INFO` shows them).
    """
    if ours.shape != ref64.shape:
        raise ValueError(f"{what}: ours has shape {tuple(ours.shape)}, the reference {tuple(ref64.shape)}")
    err_theirs, scale, bound = error_bound(theirs, ref64, what=what, dtype=dtype)
    errors = Errors(float((ours.double() - ref64).abs().max()), err_theirs, scale, bound)
    log.info("%s: %s", what, errors)
    if errors.ours > bound:
        raise AssertionError(f"{what}: ours is too far from the float64 reference: {errors}")
    return errors


def assert_near_tie(
    ours_token: int,
    theirs_token: int,
    theirs: torch.Tensor,  # [V] HF's logits at the diverging position, in `dtype`
    ref64: torch.Tensor,  # [V] float64 reference logits there
    *,
    what: str,
    dtype: torch.dtype = torch.float32,
) -> float:  # -> the larger exact-arithmetic gap from the top logit to either chosen token
    """A greedy divergence is excused only at a near-tie (STYLE §5), and then reported as a warning.

    Each logit may be off by the bound of `assert_close_to_float64`, so two tokens can swap order only
    if their exact (float64) logits lie within twice that bound. Both chosen tokens must lie that close
    to the top reference logit; anything further apart is a real divergence.
    """
    _, _, bound = error_bound(theirs, ref64, what=what, dtype=dtype)
    top = float(ref64.max())
    gap = max(top - float(ref64[ours_token]), top - float(ref64[theirs_token]))
    if gap > 2 * bound:
        raise AssertionError(
            f"{what}: ours chose {ours_token}, theirs {theirs_token}, but in float64 they trail "
            f"the top logit by {gap:.2e} > 2 * bound {bound:.2e}: not a near-tie"
        )
    warnings.warn(
        f"{what}: diverged at a near-tie (tokens {ours_token} vs {theirs_token}, float64 gap {gap:.1e} "
        f"<= 2 * fp32 bound {bound:.1e})",
        stacklevel=2,
    )
    return gap


def assert_rounds_like(
    ours: torch.Tensor,  # [...] computed in `dtype`, or rounded at every stored tensor exactly as `dtype` is
    theirs: torch.Tensor,  # [...] the torch reference run in `dtype`, same shape
    ref64: torch.Tensor,  # [...] float64 reference, same shape
    *,
    what: str,
    dtype: torch.dtype,
    k: float = K,
) -> Errors:
    """Two-sided: min(err(theirs), u·scale) / k <= err(ours) <= k · max(err(theirs), u·scale).

    The upper side is `assert_close_to_float64`'s (with the caller's k: ONNX Runtime against torch uses the
    export harness's K_ORT). The lower side checks that ours really holds `dtype`'s values: a computation
    that stores its tensors in `dtype` is rounded (unit roundoff u) at every stored element, so over a
    tensor of many elements its largest error against the exact result is of the order of u · scale, as
    theirs is; the same computation in a wider type (float32 for a bfloat16 graph) lands ~2**16 times
    closer and fails. Neither side depends on the machine: both are measured here in units of the
    dtype's own rounding.
    """
    if ours.shape != ref64.shape:
        raise ValueError(f"{what}: ours has shape {tuple(ours.shape)}, the reference {tuple(ref64.shape)}")
    err_theirs, scale, _ = error_bound(theirs, ref64, what=what, dtype=dtype)
    floor = unit_roundoff(dtype) * scale
    errors = Errors(float((ours.double() - ref64).abs().max()), err_theirs, scale, k * max(err_theirs, floor))
    log.info("%s: %s", what, errors)
    if errors.ours > errors.bound:
        raise AssertionError(f"{what}: ours is too far from the float64 reference: {errors}")
    if errors.ours < min(err_theirs, floor) / k:
        raise AssertionError(
            f"{what}: ours is closer to the float64 reference than {dtype} rounding allows "
            f"(computed in a wider type?): {errors}"
        )
    return errors
