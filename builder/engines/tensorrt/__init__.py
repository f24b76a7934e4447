"""TensorRT engines for GPU targets (TensorRT ≥ 10.15; GPU hosts only).

* `probe` — is TensorRT here? (`missing()`: the reason it is not; with tensorrt-stubs alone, `import
  tensorrt` succeeds as an empty namespace package, so the probe asks for `tensorrt.Builder`);
* `profiles` — the optimization profiles (prefill, step) of each graph, and which one a call uses;
* `build` — `build_engine`: the TensorRT-form ONNX graph (`builder.export.tensorrt`) → a serialized
  engine in a strongly typed network checked against the I/O contract's types, the tree_verify plugin
  registered, the host's timing cache (`timing`), a manifest;
* `device` — `Lane`: one dedicated CUDA stream and one scratch arena shared by every execution context of
  an opened folder's engines (`CudaApi`: what the runtime asks of CUDA, torch's on GPU hosts);
* `kv` — `DeviceKV`: a graph's KV buffer on the device in the contract's KV dtype (bf16 / fp16 / fp32: the
  TensorRT form has no FP8 cache, `builder.export.tensorrt`);
* `runtime` — `TrtGraph` (a deserialized engine, one user-managed context per profile, device I/O slots
  and pinned staging) and `TrtBinding` (host arrays in, host arrays out, one synchronisation per call);
* `target` — `TrtEngine`, the `Engine` protocol (host side shared with ONNX Runtime:
  `builder.engines.batched`); `eagle` — `TrtEagleNet`, the `EagleNet` protocol (host side:
  `builder.engines.eagle_host`);
* `folder` — the engine stage's GPU output (engine.json with backend "tensorrt") and `open_engine`;
* `lock` — the version lock (TensorRT, compute capability, tree_verify plugin code) and `check_lock`.

Nothing here imports tensorrt, torch or triton at module level, nor ONNX Runtime at all: each function
imports what it needs and `probe.require()` turns an ImportError into the install hint. Type-checked with
mypy --strict against tensorrt-stubs (`python -m builder.engines.tensorrt.typecheck`); run only on a GPU
host with TensorRT (CPU tests drive it through fakes of TensorRT and CUDA, tests/unit/test_tensorrt_runtime.py).
"""
