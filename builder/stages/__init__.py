"""Build stages: declared, content-addressed, atomic, locked, resumable (`trtspec build`).

* `stage` — `Stage` (one per stage module, `STAGE`: name, recipe fields, tools, upstream, `run`), `Backend` (its
  stage pipeline, memory plan and engine lock) and `StageContext`, what a running stage gets;
* `load`, `quantize`, `export`, `engine` (ONNX Runtime), `tensorrt_engine`, `repo` — trtspec's own stages;
  `backends/` — one module per engine backend (`onnxruntime`, `tensorrt`, `trtllm`: the TensorRT-LLM backend with its
  checkpoint, engine and repo stages), found by name through `registry`;
* `keys` — the recipe's planned stages and their cache keys (inputs, tools, the code of each stage's import
  closure); `inputs` — the identity of the files a recipe names (checkpoints, trees, calibration text);
* `manifest` — one `manifest.json` per stage output: key, upstream, inputs, tool versions, wall time,
  peak RSS, output files with sizes and sha256, the stage's facts (`builder.handoffs`: what stages hand on);
* `store` — the cache: `<cache>/<stage>/<key>/`, written in a temp folder and renamed into place only
  when complete (a killed build leaves no output, only a temp folder the next build removes), one lock
  per stage key so two builds of one recipe never write the same output; `prune` — `trtspec cache`;
* `runner` — runs the plan's stages in order, reusing cache hits, with a progress display.
"""
