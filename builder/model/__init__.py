"""Llama 3 torch reference model: the oracle engine every other engine is tested against.

Modules: `config` (LlamaConfig from HF config.json; no torch), `loader` (strict checkpoint loading),
`llama` (the model), `kv_cache` (preallocated cache with commit/compaction), `engine` (TorchEngine,
the `builder.speculative.engine.Engine` implementation). Nothing is imported here, so `import builder.model`
stays free of torch; import the submodule you need.
"""
