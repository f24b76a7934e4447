#!/usr/bin/env bash
# The one-shot GPU check: one run, as much evidence as the host allows, every step with its verdict line.
#
#   scripts/gpu_check.sh [--budget-s 480] [--out DIR] [--steps GLOB,..] [--skip GLOB,..] [--list] [--preflight-only]
#
# Prints a PREFLIGHT line (Python, NumPy, torch + CUDA, GPUs, Triton, TensorRT, TensorRT-LLM, pydantic,
# onnxruntime, modelopt) and HAZARD lines, then for every step, the moment it ends:
#   PASS|FAIL|SKIP <step> (<seconds> s): <reason>
# Each step runs in its own process group with a timeout (a CUDA fault, a crash or a hang fails that step
# only); a step whose needs this host lacks, or that would not fit what is left of the budget, SKIPs with the
# reason. gpu_check.json (all verdicts so far, the preflight, what is running / pending) and gpu_check.log are
# rewritten after every step into $OUT when set, else into --out (default out/gpu_check). Exit 0 when no
# step FAILed, 1 otherwise (128 + signal when interrupted). Builds and caches go to --work-dir
# (default out/gpu_check_work; reruns reuse them).
#
# Interpreter: $PYTHON, else .venv/bin/python, else python3 (runs from the source tree: PYTHONPATH=.).
# No network, no pip index needed: a wheelhouse folder (.whl/, made here by `scripts/wheelhouse.sh .whl`)
# is installed offline first (`pip install --no-index --no-deps --target`, only what the host lacks) — the
# borrowed GPU machines have torch + Triton + NumPy 2.5 but no pydantic and no modelopt. Carry `.whl`.
#
# Steps and their estimates on one H100 (devtools/gpu_check/steps.py sizes each; `--list` prints them):
#   step                              est s  runs where
#   wheelhouse                            5  a .whl folder is present
#   preflight                            10  always
#   kernel                               90  CUDA + Triton
#   kernel-bandwidth                     20  CUDA + Triton (goal: >= 80 % of copy bandwidth at B=16)
#   kernel-garbage-indices               15  CUDA + Triton
#   host-cuda                            20  CUDA (TensorRT stand-in over real device memory and streams)
#   plugin-impl-stream                   20  CUDA + Triton (tensorrt.plugin stand-in, external stream)
#   trt-probe-rope                       20  TensorRT >= 10.15
#   trt-probe-kv-update                  30  TensorRT >= 10.15
#   trt-probe-attention                  20  TensorRT >= 10.15
#   trt-probe-treeverify-attrs           30  TensorRT >= 10.15 + Triton
#   trt-plugin-engine                    45  TensorRT >= 10.15 + Triton
#   quantize-fp8-cuda                    90  CUDA + trtspec CLI (pydantic) + modelopt
#   engine-<recipe>-<fp32|bf16>         180  TensorRT + trtspec CLI; 4 recipes x 2 dtypes
#   trtllm-<method>                     240  tensorrt_llm (NVIDIA's Triton TRT-LLM container); 4 methods
#   llmapi-eagle3                       240  tensorrt_llm (PyTorch flow: trtllm-serve, EAGLE-3 vs ONNX Runtime)
# Borrowed H100 (no TensorRT): wheelhouse .. quantize = ~270 s, inside the default 480 s budget. A TensorRT
# host adds ~145 s of probes and plugin engine and 8 x 180 s of engines: raise --budget-s (or --steps) there;
# a TensorRT-LLM container adds 5 x 240 s. Measured on the CPU build machine (no GPU: every GPU step SKIPs):
# 4-7 s (tests/unit/test_gpu_check_script.py runs it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m devtools.gpu_check "$@"
