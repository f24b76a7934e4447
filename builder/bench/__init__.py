"""The serving benchmark (`trtspec bench`: perf_analyzer / genai-perf against a served repository) and the
acceptance profile (`trtspec profile-acceptance`). Speed is measured here, never asserted in tests; the
development benchmarks are in `devtools.bench`."""
