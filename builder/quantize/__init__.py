"""FP8 post-training quantization with NVIDIA modelopt, and what reads its result.

The `quantize` stage (`builder.stages.quantize`) writes one format — modelopt's unified HF FP8 checkpoint, each
weight quantized once with the scale every backend uses — from one of two sources:

* `placement` — where PTQ runs and what it needs there (pure functions of host facts): this host's CUDA
  devices in the recipe's model.dtype, the model spread over up to `target.gpus` of them, else the CPU in
  float32; `trtspec plan` states it and refuses what cannot fit;
* `calibration` — the recipe's calibration text (`builtin:stdlib`, `builtin:humaneval`, a JSONL file)
  as `num_samples` × `seq_len` token ids, tokenized with the recipe's tokenizer;
* `ptq` — modelopt (`MODELOPT_RANGE`: 0.37's dict-form configs and 0.47's list form): `FP8_DEFAULT_CFG`
  (+ `FP8_KV_CFG` for `kv_cache: fp8`) on an HF `LlamaForCausalLM` loaded from the checkpoint, the recipe's
  `exclude_modules` kept in the model dtype, one weight scale per fused group (q/k/v, gate/up: TensorRT-LLM's
  fused GEMMs), then modelopt's own unified HF checkpoint export (`export_hf_checkpoint`): float8_e4m3fn
  weights + `weight_scale` + `input_scale` per quantized linear, `k_proj.k_scale` / `v_proj.v_scale` per layer
  for the KV cache, config.json + hf_quant_config.json;
* `prequantized` — `model.checkpoint` already a modelopt FP8 checkpoint (as NVIDIA publishes them): no
  calibration; its bytes and scales, requantized only where a fused group's scales differ;
* `checkpoint` — reads that folder back strictly (`Fp8Checkpoint`): the quantized linears, the KV
  scales, and the dequantized model (`builder.model.llama.Llama`) the export and the references use;
* `reference` — the readable torch reference of the FP8 model: dequantized weights, activations and KV
  fake-quantized exactly as the exported Q/DQ graph does (tests compare them in float64);
* `quality` — the per-build quality report (perplexity, greedy agreement, τ per method; FP8 vs fp32).

FP8 arithmetic (E4M3FN, max 448): q(x) = clamp(round_half_even(x / s), ±448) as float8, x̂ = q · s with
s = amax / 448 from calibration (activations, KV) or from the weights themselves (per-tensor; the max over a
fused group's weights).
"""
