"""What each upstream runtime would load from an EAGLE-3 draft checkpoint — read, not run (none installs here).

One pure function per runtime, `(config.json dict, {stored key: (shape, safetensors dtype)}, Target) -> Loaded`,
mirrors that runtime's module construction (its parameter names and shapes, from the config keys it reads) and its
`load_weights` (its renames, what it fuses, skips or refuses), and says which target layers it would capture —
in our output-of-layer ids, after its own convention — and how it maps draft ids to target ids. Where the runtime
would fail, or would run with a parameter the checkpoint never filled, or with other math than ours (variant
flags), the reader raises `Refusal` naming the key. The sources read, file@commit (the table in
docs/eagle3-checkpoints.md says the same):

- TensorRT-LLM: `tensorrt_llm/_torch/models/modeling_speculative.py`@00679c66c3e38f6d2651ad0a5bef0f94d862e36c
  (`Eagle3DraftModel`, `Eagle3DecoderLayer`, `Eagle3ForCausalLM.load_weights`: `^layers.0.` → `midlayer.`, "model."
  before every key but lm_head, lm_head from the target when the draft has none, `d2t` an int32 parameter only when
  draft_vocab_size ≠ vocab_size, `embed_tokens` only when target_hidden_size ≠ hidden_size),
  `modeling_auto.py`@01bffee125e24ebe5b4a63437840a9422eb70868 (two-model flow: EAGLE-3 detected only by
  `draft_vocab_size`), `_torch/speculative/eagle3.py`@001e67005b4f64b69b0045456870be48ab7b2cf0 (layers to capture:
  the LLM-API option `eagle3_layers_to_capture`, sorted, else {1, N/2-1, N-4}, "Not enough hidden layers" for N ≤ 5;
  captured after layer i: output-of-layer ids). The draft's config ids are not read.
- vLLM: `vllm/model_executor/models/llama_eagle3.py`@00bd1493b3e82d6c13c68ee8a0e1c5a96707e190 (`midlayer.` →
  `layers.0.`, `d2t` → `draft_id_to_target_id`, `t2d` skipped, `embed_tokens` loaded only when present, an unknown
  key is a KeyError, fc = 3 × target_hidden_size, `eagle_config.use_aux_hidden_state`, `norm_before_residual`),
  `vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`@0cfdd2e15d6991f354c6e22fd7f7e7577afe0424 (ids from the
  top-level `eagle_aux_hidden_state_layer_ids` as they are; eagle_config's are not read; else the model's default),
  `vllm/model_executor/models/llama.py`@e06c9ba2a6ea923a84add30f5dafaea126429b81 (default (2, N/2, N-3); captured
  before layer idx: input-of-layer ids). Some vLLM versions also read `eagle_aux_layer_semantics: "sglang"` (+1).
- SGLang: `python/sglang/srt/models/llama_eagle3.py`@03d5a7771f6082e7737a5f19cae7d1e863087013 (EntryClass
  `LlamaForCausalLMEagle3`; `d2t` → `hot_token_id = d2t + arange`, `t2d` skipped, a key that is not a parameter
  (with or without "model.") skipped silently — so `layers.0.*` never reaches `midlayer`), `models/llama.py`
  @00239548f1cd1a06ca145a5447a86738090a48f1 (ids + 1, default [2, N/2, N-3], captured before layer i),
  `model_executor/model_runner.py`@0005834cdb2a5b7472789ccbf0d3361b5cf853b8 (ids from
  `eagle_config.eagle_aux_hidden_state_layer_ids` only).
- modelopt 0.47 (installed; its loader runs in the tests): `torch/export/plugins/hf_spec_export.py`
  (`EagleExporter._extract_state_dict`: the `eagle_module.` prefix dropped, `LLAMA_EAGLE_SINGLE_LAYER`), and
  `torch/speculative/plugins/modeling_eagle.py` (`EagleModule`: d2t buffer only when draft_vocab_size < vocab_size,
  lm_head only then or with `has_lm_head`), `plugins/hf_eagle.py` (forward hooks on the target's layer outputs in
  layer order, default sorted({1, N/2-1, N-4})).

No torch at module level: these read names and shapes only; the tests compare the tensors.
"""

from __future__ import annotations

from typing import Callable

from builder.speculative.eagle3.upstream_common import Entries, Loaded, Param, Refusal, Target
from builder.speculative.eagle3.upstream_modelopt import modelopt
from builder.speculative.eagle3.upstream_sglang import sglang
from builder.speculative.eagle3.upstream_tensorrt_llm import tensorrt_llm
from builder.speculative.eagle3.upstream_vllm import vllm

__all__ = ["READERS", "Entries", "Loaded", "Param", "Refusal", "Target", "modelopt", "sglang", "tensorrt_llm", "vllm"]

READERS: dict[str, Callable[..., Loaded]] = {
    "tensorrt_llm": tensorrt_llm,
    "vllm": vllm,
    "sglang": sglang,
    "modelopt": modelopt,
}
