"""The one-shot GPU check (scripts/gpu_check.sh): one run, as much evidence as the host allows.

runner.py     the driver (standard library only): steps in child processes, budget, verdict lines, JSON + log
steps.py      the step table: order, needs, estimates, limits
child.py      one step in its own process (result JSON; test-only injected failures)
preflight.py  host facts, the PREFLIGHT line, known hazards
wheelhouse.py what the borrowed GPU machines lack, downloaded here, installed there offline
kernel.py     the tree_verify Triton kernel: correctness, the bandwidth goal, garbage indices
suites.py     tests/gpu files as steps (TensorRT host layers over real CUDA; the plugin impl on a stream)
probes.py     seconds-long TensorRT probes (RoPE, KV update, attention, QDP attribute forms)
engines.py    the TreeVerify plugin engine; the fixture recipes' TensorRT engines vs ONNX Runtime
quantize.py   the tiny fixture's FP8 calibration with CUDA visible
trtllm.py     the TensorRT-LLM bundle: build, deploy, launch.sh, served tokens vs ONNX Runtime
"""
