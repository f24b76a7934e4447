"""Development benchmarks (speed is measured here, never asserted in tests), run by scripts/*.py.

decode.py, rows.py, decode_table.py, fixtures.py, peers.py, tuned.py, verify_cost.py
                     scripts/bench_decode.py: tokens/s of every method and the CPU peers, interleaved, on fixtures
host.py              scripts/bench_host.py: the Python around the session calls per decoding step
step.py              scripts/bench_step.py: the step-cost curve beside this machine's roofline floor
profile.py           scripts/profile_step.py: one step under ONNX Runtime's profiler, ours beside ORT GenAI's
export_variants.py   scripts/bench_export_variants.py: the exported graph variants' step time and node counts
scale.py             scripts/bench_scale.py: export and session memory at 8B width
trtllm_checkpoint.py scripts/bench_trtllm_checkpoint.py: the TensorRT-LLM checkpoint writer's peak memory
soak.py              scripts/soak.py: a served recipe under many streams, cancels and faults

The serving benchmark `trtspec bench` and `trtspec profile-acceptance` are product commands: their code stays
in `builder.bench`.
"""
