"""The TensorRT-LLM 1.2.x checkpoint: writer (HF Llama 3 + draft + FP8 → config.json + rank{N}.safetensors), reader.

`convert_checkpoint(req, out)` writes what TensorRT-LLM's `convert_checkpoint.py` (`LLaMAForCausalLM.
from_hugging_face` + `save_checkpoint`; `examples/medusa`, `examples/eagle`) writes for the same inputs:
the layout is in `names.py` (tensor names, tp/pp splits, KV-head duplication, vocabulary padding),
`config.py` (config.json), `fp8.py` (FP8 weights and scales), and a method's draft in the module its
`EngineFlow.checkpoint` names (`drafts.py`: `medusa.py`, `eagle.py`); Lookahead has no weights of its own — its
checkpoint is the plain `LlamaForCausalLM` one and the mode is a `trtllm-build` flag
(`examples/lookahead/README.md`: "Checkpoint conversion is similar to any standard autoregressive model").
The conversion streams tensor by tensor (`safetensors_stream.py`).

`read_checkpoint(folder)` reassembles any such checkpoint into the torch reference (`reader.py`),
written from the format, not from the writer's code: it is the proof that a conversion is right.

Nothing here imports torch, safetensors or tensorrt_llm at module level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from builder.trtllm.checkpoint.reader import Reassembled

__all__ = ["CheckpointRequest", "convert_checkpoint", "read_checkpoint"]


@dataclass(frozen=True)
class CheckpointRequest:
    """What to convert and how (validated by `convert_checkpoint`; bad values are UserErrors).

    EAGLE: `num_eagle_layers` is the tree depth (static choices: the deepest choice; dynamic: `depth`),
    `max_non_leaves_per_layer` the widest level that expands (static: most non-leaf nodes at one depth;
    dynamic: `top_k`) and `max_draft_len` the draft tokens per step (static: len(choices); dynamic:
    total_nodes), as `examples/eagle/convert_checkpoint.py` and the LLM API's `EagleDecodingConfig` take them.
    EAGLE-2's dynamic tree itself is a runtime setting (`use_dynamic_tree`, `dynamic_tree_max_topK`), not
    part of the checkpoint; `eagle_version` / `eagle_dynamic_top_k` only go to the manifest facts.
    """

    base_dir: Path  # HF Llama 3: config.json + model.safetensors (or a sharded index)
    tp: int
    pp: int
    dtype: str  # "bfloat16" | "float16" | "float32"
    method: str  # a method TensorRT-LLM 1.2's engine flow serves (`builder.trtllm.flow`); its draft: `drafts.py`
    draft_dir: Path | None = None  # Medusa heads (FasterDecoding layout) or EAGLE-1/2 draft (SafeAILab layout)
    medusa_num_heads: int = 0  # 0: every head of the checkpoint
    medusa_num_layers: int = 0  # 0: as the checkpoint's config.json says
    max_draft_len: int = 0  # 0 for none; Medusa: tree nodes; EAGLE: draft tokens; Lookahead: build flag only
    eagle_version: int = 1  # 1 (static choices) | 2 (dynamic tree)
    num_eagle_layers: int = 0
    max_non_leaves_per_layer: int = 0
    eagle_dynamic_top_k: int = 0
    fp8_dir: Path | None = None  # the quantize stage's output (modelopt 0.47 unified HF FP8 checkpoint)
    kv_cache_fp8: bool = False
    use_parallel_embedding: bool = False


def convert_checkpoint(
    req: CheckpointRequest, out: Path, say: Callable[[str], None] = lambda _message: None
) -> dict[str, Any]:
    """Write the TensorRT-LLM checkpoint for `req` into folder `out` (absent or empty); return manifest facts.

    Facts: architecture, dtype, method, mapping (tp_size, pp_size, world_size, pp_layers), vocab_size(_padded),
    quantization (quant_algo, kv_cache_quant_algo, exclude_modules), fp8_linears, max_draft_len, per-rank
    files with bytes / tensor counts / largest tensor, total tensors and bytes.
    """
    from builder.trtllm.checkpoint.writer import convert

    return convert(req, Path(out), say)


def read_checkpoint(folder: Path) -> Reassembled:
    """Reassemble the TensorRT-LLM checkpoint in `folder` into the torch reference (float32)."""
    from builder.trtllm.checkpoint.reader import read

    return read(Path(folder))
