"""Llama 3 torch reference model: the oracle every other engine is tested against.

Modules: `config` (LlamaConfig from HF config.json; no torch), `loader` (strict checkpoint loading),
`llama` (the model), `kv_cache` (preallocated cache with commit/compaction). The engine over it is
`builder.engines.torch_engine.TorchEngine`. Nothing is imported here, so `import builder.model` stays
free of torch; import the submodule you need.
"""
