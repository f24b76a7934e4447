"""Compile the Triton kernels for a GPU architecture without a GPU (Triton's bundled ptxas):
`python -m plugins.tree_verify.compile_check [--arch 90]` (90 = H100 / H200).

The interpreter tests check the kernels' logic; this checks that the real compiler accepts them
(types of loop-carried values, runtime loop bounds, while loops, tuple returns) and produces cubin,
for every mode and logits dtype. Must run without TRITON_INTERPRET (the test runs it in a subprocess).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

LOGITS = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16"}


def _signatures(logits: str) -> dict[str, dict[str, str]]:
    f32, i32 = "*fp32", "*i32"
    return {
        "_partials_kernel": dict(
            logits_ptr=logits,
            temperature_ptr=f32,
            pmax_ptr=f32,
            parg_ptr=i32,
            psum_ptr=f32,
            T="i32",
            V="i32",
            chunk="i32",
        ),
        "_node_stats_kernel": dict(
            logits_ptr=logits,
            temperature_ptr=f32,
            top_p_ptr=f32,
            pmax_ptr=f32,
            parg_ptr=i32,
            psum_ptr=f32,
            node_max_ptr=f32,
            node_arg_ptr=i32,
            node_tau_ptr=f32,
            node_mass_ptr=f32,
            T="i32",
            V="i32",
            split="i32",
        ),
        "_verify_kernel": dict(
            logits_ptr=logits,
            tokens_ptr=i32,
            paths_ptr=i32,
            temperature_ptr=f32,
            uniforms_ptr=f32,
            q_ptr=f32,
            node_max_ptr=f32,
            node_arg_ptr=i32,
            node_tau_ptr=f32,
            node_mass_ptr=f32,
            len_ptr=i32,
            best_ptr=i32,
            out_ptr=i32,
            T="i32",
            V="i32",
            P="i32",
            W="i32",
            paths_stride="i32",
        ),
    }


_BLOCKS = {
    "_partials_kernel": dict(BLOCK_V=2048),
    "_node_stats_kernel": dict(BLOCK_V=256, BLOCK_S=4),
    "_verify_kernel": dict(BLOCK_P=64, BLOCK_W=8, BLOCK_V=1024),
}


def compile_all(arch: int = 90) -> list[tuple[str, str, bool, float, int]]:
    """Compile every kernel × logits dtype × mode; returns (kernel, dtype, sample, seconds, cubin bytes)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("unset TRITON_INTERPRET: the interpreter does not compile")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from plugins.tree_verify import kernel

    done = []
    for dtype, logits in LOGITS.items():
        for name, sig in _signatures(logits).items():
            for sample in (False, True):
                consts = dict(_BLOCKS[name], SAMPLE=sample)
                src = ASTSource(
                    fn=getattr(kernel, name), signature={**sig, **{k: "constexpr" for k in consts}}, constexprs=consts
                )
                start = time.time()
                compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32))
                done.append((name, dtype, sample, time.time() - start, len(compiled.asm["cubin"])))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", type=int, default=90, help="compute capability × 10 (90: H100/H200)")
    args = ap.parse_args(argv)
    for name, dtype, sample, secs, size in compile_all(args.arch):
        print(f"{name:20} {dtype:9} {'rejection' if sample else 'greedy':9} {secs:5.1f} s  cubin {size:>7} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
