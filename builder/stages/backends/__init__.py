"""The engine backends (`target.backend`): each one module declaring its stage pipeline, memory plan and engine lock
(`builder.stages.stage.Backend`), found by name through `builder.stages.registry`, which `trtspec plan` and
`trtspec build` ask.

    onnxruntime   builder/stages/backends/onnxruntime.py   cpu: trtspec's graphs in ONNX Runtime
    tensorrt      builder/stages/backends/tensorrt.py      one GPU: trtspec's graphs as TensorRT engines
    trtllm        builder/stages/backends/trtllm/          GPUs: TensorRT-LLM 1.2.x (its stages live there)
    trtllm-llmapi builder/stages/backends/trtllm_llmapi/   GPUs: TensorRT-LLM's PyTorch / LLM-API flow

They sit inside builder/stages because the pipeline that asks them (keys, runner) does: a backend names stage
modules, and the runner — which `trtspec generate` and `trtspec tune` call to build an engine — must find the
backend without an import back up the layers. This package's __init__ imports nothing: a stage module inside it
(the trtllm backend's) must not carry every backend in its import closure, hence its cache key.
"""
