"""Engines: the target model behind the `Engine` protocol (`builder.speculative.protocols`).

* `torch_engine.TorchEngine` — the plain-torch reference (the oracle every other engine is tested
  against), and `torch_eagle.TorchEagleNet`, the EAGLE draft layer's torch face;
* `ort/` — ONNX Runtime sessions over the exported graphs (`builder.export`), the CPU target;
* `tensorrt/` — TensorRT engines for GPU targets (adapters imported only where TensorRT is installed);
* `batched` — the host side the ONNX Runtime and TensorRT engines share: rows, inputs, verdict, commit, and the
  greedy fast steps the decoding loop's fast paths take;
* an engine, drafter factory and tokenizer from a recipe: `builder.stages.decoders.build_decoder` (`DecoderSetup`).

Importing this package imports nothing heavy; each module imports its library itself.
"""
