"""The ONNX Runtime engine (CPU target): sessions over the graphs of `builder.export`.

* `session` — sessions (threads, optimisation) and `Bound`: one prepared IOBinding per input shape,
  with preallocated NumPy input/output arrays, so a step fills arrays in place and runs (no per-step
  allocation, no copy of the KV cache);
* `kv` — the KV buffers: one NumPy array per model, rows 0..B-1 = the running batch, bound to the
  graphs as both past and present (the write happens in place), commit by compaction;
* `target` — `OrtEngine`, the `Engine` protocol: verification inside the graph, logits never leave it;
* `eagle` — `OrtEagleNet`, the `EagleNet` protocol over the EAGLE draft graph;
* `build` — export (content-addressed cache) + engine + drafter for a recipe.
"""
