"""Recipe → `TrtllmRepoSettings`: which recipe field sets which parameter of the inflight_batcher_llm repository.

One mapping for the repo stage (engine folder on the GPU host) and `trtspec deploy` (engine path inside
the container). The parameters' meaning and legal values are in `triton_repo.trtllm.settings`.
"""

from __future__ import annotations

from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import tree_field
from builder.speculative import registry
from builder.trtllm.flow import engine_flow
from triton_repo.trtllm.settings import TrtllmRepoSettings

# recipe field (dotted) → settings field, for the manifest and the README's table
FIELDS = {
    "triton.model_name": "model_name",
    "build.max_batch_size": "max_batch_size",
    "triton.decoupled": "decoupled",
    "triton.max_queue_delay_us": "max_queue_delay_us",
    "triton.max_queue_size": "max_queue_size",
    "triton.instances.preprocessing": "preprocessing_instances",
    "triton.instances.postprocessing": "postprocessing_instances",
    "trtllm.batch_scheduler_policy": "batch_scheduler_policy",
    "triton.kv_cache_free_gpu_mem_fraction": "kv_cache_free_gpu_mem_fraction",
    "trtllm.max_tokens_in_paged_kv_cache": "max_tokens_in_paged_kv_cache",
    "trtllm.enable_chunked_context": "enable_chunked_context",
    "trtllm.enable_kv_cache_reuse": "enable_kv_cache_reuse",
    "triton.exclude_input_in_output": "exclude_input_in_output",
    "speculative.method": "decoding_mode",  # the method's `EngineFlow.decoding_mode`
    "speculative.tree": "medusa_choices / eagle_choices",  # its `EngineFlow.repo_parameter`
    "speculative.window/ngram/verification_set": "lookahead",
    "parallelism.tp × parallelism.pp": "world_size",
}


def repo_settings(loaded: LoadedRecipe, engine_dir: str) -> TrtllmRepoSettings:
    """The repository settings of `loaded` with the engine at `engine_dir` (as the server sees it)."""
    r = loaded.recipe
    spec, t = r.speculative, r.triton
    method = registry.of(spec)
    flow = engine_flow(spec.method)  # validate refuses an unserved method first (`builder.recipe.trtllm_checks`)
    speculative: dict = {}  # the repository parameter carrying the method's settings (medusa_choices, …)
    if flow.repo_parameter is not None and flow.repo_value is not None:
        speculative[flow.repo_parameter] = flow.repo_value(method.resolved(spec, loaded.dir_of(tree_field(r))))
    settings = TrtllmRepoSettings(
        engine_dir=engine_dir,
        model_name=t.model_name,
        max_batch_size=r.build.max_batch_size,
        decoupled=t.decoupled,
        max_queue_delay_us=t.max_queue_delay_us,
        max_queue_size=t.max_queue_size,
        preprocessing_instances=t.instances.preprocessing,
        postprocessing_instances=t.instances.postprocessing,
        batch_scheduler_policy=r.trtllm.batch_scheduler_policy,
        kv_cache_free_gpu_mem_fraction=t.kv_cache_free_gpu_mem_fraction,
        max_tokens_in_paged_kv_cache=r.trtllm.max_tokens_in_paged_kv_cache,
        enable_chunked_context=r.trtllm.enable_chunked_context,
        enable_kv_cache_reuse=r.trtllm.enable_kv_cache_reuse,
        exclude_input_in_output=t.exclude_input_in_output,
        decoding_mode=flow.decoding_mode,
        world_size=r.parallelism.tp * r.parallelism.pp,
        **speculative,
    )
    return settings.validate()
