"""The Triton `inflight_batcher_llm` repository for TensorRT-LLM 1.2.x (`target.backend: trtllm`).

    from triton_repo.trtllm import TrtllmRepoSettings, render_repository
    facts = render_repository(out, TrtllmRepoSettings(engine_dir="/engines/llama3"), tokenizer_src)

Five models, as upstream lays them out (NVIDIA/TensorRT-LLM `triton_backend/all_models/inflight_batcher_llm/`):
preprocessing (text -> ids), tensorrt_llm (TensorRT-LLM's C++ backend on the GPU), postprocessing
(ids -> text), an ensemble chaining them, and tensorrt_llm_bls (the same chain as one Python model).
Configs are rendered from protobuf (`render`), with upstream's tensor names, dtypes, dims and parameter
keys recorded as data (`upstream`) and every value typed (`settings`). The Python models are trtspec's
own standalone files (`models/`): NVIDIA's container has no trtspec installed. `models/fake_tensorrt_llm.py`
is a CPU stand-in for tests only (no GPU, no TensorRT-LLM here), never part of a rendered repository.
"""

from triton_repo.trtllm.render import render_repository
from triton_repo.trtllm.settings import SettingsError, TrtllmRepoSettings

__all__ = ["SettingsError", "TrtllmRepoSettings", "render_repository"]
