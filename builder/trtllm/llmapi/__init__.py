"""The TensorRT-LLM PyTorch / LLM-API backend (`target.backend: trtllm-llmapi`): what trtspec hands to the flow
TensorRT-LLM goes on with after its engine path (trtllm-serve, the LLM API, the Triton `llmapi` model).

trtspec writes the served checkpoint (`checkpoint`: modelopt's unified FP8 HF checkpoint and the EAGLE-3 draft with
the config keys TensorRT-LLM reads), the LLM-API options (`options`, every key checked against `llm_args_table`),
the Triton `llmapi` repository (`repo`) and a deployment bundle (`bundle`, `k8s`, `deploy`). The releases it
writes for are `builder.recipe.trtllm.LLMAPI_RELEASES`; docs/trtllm-llmapi.md is the user's page. Nothing here
imports tensorrt_llm: TensorRT-LLM runs in NVIDIA's containers only.
"""
