"""TensorRT engines for GPU targets (TensorRT ≥ 10.15; GPU hosts only).

* `probe` — is TensorRT here? (`missing()`: the reason it is not; with tensorrt-stubs alone, `import
  tensorrt` succeeds as an empty namespace package, so the probe asks for `tensorrt.Builder`);
* `profiles` — the optimization profiles (prefill, step) of each graph, and which one a call uses;
* `build` — `build_engine`: the TensorRT-form ONNX graph (`builder.export.tensorrt`) → a serialized
  engine in a strongly typed network, the tree_verify plugin registered, a timing cache, a manifest;
* `runtime` — a deserialized engine with one execution context per profile, device KV buffers, and
  `TrtBinding` (host arrays in, host arrays out, caches bound as past and present in place);
* `target` — `TrtEngine`, the `Engine` protocol (host side shared with ONNX Runtime:
  `builder.engines.batched`); `eagle` — `TrtEagleNet`, the `EagleNet` protocol;
* `folder` — the engine stage's GPU output (engine.json with backend "tensorrt") and `open_engine`.

Nothing here imports tensorrt, torch or triton at module level: each function imports what it needs and
`probe.require()` turns an ImportError into the install hint. Type-checked with mypy --strict against
tensorrt-stubs (`python -m builder.engines.tensorrt.typecheck`); run only on a GPU host with TensorRT.
"""
