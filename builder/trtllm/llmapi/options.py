"""The LLM-API options a recipe becomes: the keyword arguments of TensorRT-LLM's `LLM(**kwargs)` (PyTorch backend).

One dict, two files: trtllm-serve's options file (`--extra_llm_api_options`, alias `--config`; read by
`update_llm_args_with_extra_dict`, which merges it over the command line's arguments) and the Triton `llmapi`
model's model.yaml (every top-level key but `triton_config` goes to `LLM(**kwargs)`; `builder.trtllm.llmapi.repo`).
Every key is taken by each version of llm_args.py that bounds the pinned release (`llm_args_table.RELEASE_READINGS`:
for 1.2.1 the 1.2.0rc2-era file before the release/1.2 branch and two main versions after it, whose speculative API
differs; checked in the tests), so the release's own names are those both sides take: decoding_type "Eagle" and the
draft as `speculative_model_dir` on 1.2.1 (`LlmapiRelease.eagle3_decoding_type`, `.draft_key`).

Recipe -> option (tensorrt_llm/llmapi/llm_args.py @ 470bb720; the release facts `builder.recipe.trtllm`):

    model.dtype                           dtype (of what is not FP8: activations, norms, the draft)
    parallelism.tp / .pp                  tensor_parallel_size / pipeline_parallel_size
    build.max_batch_size / max_num_tokens / max_seq_len   the same names
    triton.kv_cache_free_gpu_mem_fraction kv_cache_config.free_gpu_memory_fraction
    trtllm.enable_kv_cache_reuse          kv_cache_config.enable_block_reuse (upstream's default is on)
    quantization.kv_cache: fp8            kv_cache_config.dtype: fp8 (else the checkpoint's own, "auto")
    trtllm.enable_chunked_context         enable_chunked_prefill
    build.max_batch_size                  cuda_graph_config.max_batch_size (+ enable_padding)
    speculative (eagle3)                  speculative_config: decoding_type (release's), max_draft_len (chain
                                          length or dynamic depth), the draft folder (release's key),
                                          eagle3_layers_to_capture (output-of-layer ids: TensorRT-LLM's own
                                          convention, `_torch/speculative/eagle3.py`), and on a dynamic-tree
                                          release use_dynamic_tree, dynamic_tree_max_topK (top_k),
                                          max_total_draft_tokens (total_nodes); rejection verification:
                                          allow_advanced_sampling
    speculative (ngram)                   speculative_config: NGram, max_draft_len (max_draft),
                                          max_matching_ngram_size (max_match), is_public_pool (shared_pool)
"""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.recipe.schema import Recipe
from builder.speculative import registry
from builder.speculative.method import NotServed

METHOD_FIELD = "speculative.method"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # model.dtype -> LLM(dtype=…)


def speculative_config(
    recipe: Recipe, draft: str | None, aux_layers: tuple[int, ...] | None, tree_dir: Path | None = None
) -> dict[str, Any] | None:
    """`speculative_config` for the recipe's method on its pinned release (None: plain decoding). `draft` is the
    draft folder as the server sees it; `aux_layers` the resolved output-of-layer ids (EAGLE-3). UserError for a
    method or tree the release does not serve (validate said so first: `builder.recipe.llmapi_checks`)."""
    spec, rel = recipe.speculative, recipe.trtllm.llmapi
    method = registry.of(spec)
    flow = method.trtllm.pytorch
    if isinstance(flow, NotServed):
        raise UserError(flow.reason, field=METHOD_FIELD)
    if flow.decoding_type is None:
        return None
    if flow.decoding_type == "NGram":
        return {
            "decoding_type": "NGram",
            "max_draft_len": spec.max_draft,
            "max_matching_ngram_size": spec.max_match,
            "is_public_pool": spec.shared_pool,
        }
    if flow.decoding_type != "Eagle3":
        raise UserError(f"no LLM-API mapping for decoding_type {flow.decoding_type!r}", field=METHOD_FIELD)
    if draft is None or aux_layers is None:
        raise ValueError("EAGLE-3 needs its draft folder and aux layers")
    out: dict[str, Any] = {"decoding_type": rel.eagle3_decoding_type}
    t = spec.tree
    if t.type == "static":
        resolved = method.resolved(spec, tree_dir)
        out["max_draft_len"] = len(resolved.tree.choices)  # a chain (validate refused any other static tree)
    else:
        if rel.eagle3_tree != "dynamic":
            raise UserError(
                f"TensorRT-LLM {rel.version}'s PyTorch flow drafts EAGLE-3 as a chain only", field="speculative.tree"
            )
        out["max_draft_len"] = t.depth
    out[rel.draft_key] = draft
    out["eagle3_layers_to_capture"] = sorted(aux_layers)
    if t.type == "dynamic":
        out.update(use_dynamic_tree=True, dynamic_tree_max_topK=t.top_k, max_total_draft_tokens=t.total_nodes)
    if spec.verification == "rejection" and rel.rejection:
        out["allow_advanced_sampling"] = True
    return out


def llm_options(
    recipe: Recipe, draft: str | None = None, aux_layers: tuple[int, ...] | None = None, tree_dir: Path | None = None
) -> dict[str, Any]:
    """The `LLM(**kwargs)` options of the recipe, without `model` (module docstring's table)."""
    b, par, t = recipe.build, recipe.parallelism, recipe.trtllm
    kv: dict[str, Any] = {
        "free_gpu_memory_fraction": recipe.triton.kv_cache_free_gpu_mem_fraction,
        "enable_block_reuse": t.enable_kv_cache_reuse,
    }
    if recipe.quantization.kv_cache == "fp8":
        kv["dtype"] = "fp8"
    out: dict[str, Any] = {
        "dtype": DTYPES[recipe.model.dtype],
        "tensor_parallel_size": par.tp,
        "pipeline_parallel_size": par.pp,
        "max_batch_size": b.max_batch_size,
        "max_num_tokens": b.max_num_tokens,
        "max_seq_len": b.max_seq_len,
        "enable_chunked_prefill": t.enable_chunked_context,
        "kv_cache_config": kv,
        "cuda_graph_config": {"max_batch_size": b.max_batch_size, "enable_padding": True},
    }
    spec = speculative_config(recipe, draft, aux_layers, tree_dir)
    if spec is not None:
        out["speculative_config"] = spec
    return out


def key_paths(options: dict[str, Any]) -> list[tuple[str, str]]:
    """(class, key) of every option written: top-level keys are TorchLlmArgs', nested ones their section's class
    (kv_cache_config, cuda_graph_config, speculative_config by its decoding_type)."""
    from builder.trtllm.llmapi.llm_args_table import speculative_class

    nested = {"kv_cache_config": "KvCacheConfig", "cuda_graph_config": "CudaGraphConfig"}
    out: list[tuple[str, str]] = []
    for key, value in options.items():
        out.append(("TorchLlmArgs", key))
        if key in nested:
            out += [(nested[key], k) for k in value]
        elif key == "speculative_config":
            cls = speculative_class(value["decoding_type"])
            out += [(cls, k) for k in value]
    return out
