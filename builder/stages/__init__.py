"""Build stages: content-addressed, atomic, locked, resumable (`trtspec build`).

* `manifest` — one `manifest.json` per stage output: key, upstream, inputs, tool versions, wall time,
  peak RSS, output files with sizes and sha256;
* `store` — the cache: `<cache>/<stage>/<key>/`, written in a temp folder and renamed into place only
  when complete (a killed build leaves no output, only a temp folder the next build removes), one lock
  per stage key so two builds of one recipe never write the same output;
* `runner` — runs the plan's stages in order, reusing cache hits, with a progress display;
* `load`, `quantize`, `export`, `engine` — the stages themselves.
"""
