"""FP8 post-training quantization with NVIDIA modelopt, and what reads its result.

The `quantize` stage (`builder.stages.quantize`) runs, on the CPU in fp32:

* `calibration` — the recipe's calibration text (`builtin:stdlib`, `builtin:humaneval`, a JSONL file)
  as `num_samples` × `seq_len` token ids, tokenized with the recipe's tokenizer;
* `ptq` — modelopt: `mtq.FP8_DEFAULT_CFG` (+ `FP8_KV_CFG` for `kv_cache: fp8`) on an HF
  `LlamaForCausalLM` loaded from the checkpoint, the recipe's `exclude_modules` kept in the model dtype,
  then modelopt's own unified HF checkpoint export (`export_hf_checkpoint`, which runs on the CPU):
  float8_e4m3fn weights + `weight_scale` + `input_scale` per quantized linear, `k_proj.k_scale` /
  `v_proj.v_scale` per layer for the KV cache, config.json + hf_quant_config.json;
* `checkpoint` — reads that folder back strictly (`Fp8Checkpoint`): the quantized linears, the KV
  scales, and the dequantized model (`builder.model.llama.Llama`) the export and the references use;
* `reference` — the readable torch reference of the FP8 model: dequantized weights, activations and KV
  fake-quantized exactly as the exported Q/DQ graph does (tests compare them in float64);
* `quality` — the per-build quality report (perplexity, greedy agreement, τ per method; FP8 vs fp32).

FP8 arithmetic (E4M3FN, max 448): q(x) = clamp(round_half_even(x / s), ±448) as float8, x̂ = q · s with
s = amax / 448 from calibration (activations, KV) or from the weights themselves (per-tensor).
"""
