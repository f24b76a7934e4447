"""The TensorRT-LLM 1.2.x backend (`target.backend: trtllm`): what trtspec hands to TensorRT-LLM's engine path.

TensorRT-LLM 1.2.x is the last release line with `trtllm-build` and the Triton C++ `inflight_batcher_llm`
backend (the engine path was removed on its main branch in mid-2026). For this backend trtspec writes
the TensorRT-LLM checkpoint (`checkpoint/`: config.json + rank{N}.safetensors, TP/PP splits, FP8
scales), the exact `trtllm-build` command, the `inflight_batcher_llm` model repository
(`triton_repo/trtllm/`) and a deployment bundle; paged KV, in-flight batching and TP/PP over MPI + NCCL
are TensorRT-LLM's own runtime. Nothing in this package imports tensorrt_llm at module level: the only
code that runs it is the engine stage on a GPU host.
"""
