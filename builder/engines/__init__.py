"""Engines: the target model behind the `Engine` protocol (`builder.speculative.engine`).

* `torch_engine.TorchEngine` — the plain-torch reference (the oracle every other engine is tested
  against), and `torch_eagle.TorchEagleNet`, the EAGLE draft layer's torch face;
* `ort/` — ONNX Runtime sessions over the exported graphs (`builder.export`), the CPU target;
* `tensorrt/` — TensorRT engines for GPU targets (adapters imported only where TensorRT is installed);
* `factory` — an engine, drafter and tokenizer from a recipe.

Importing this package imports nothing heavy; each module imports its library itself.
"""
