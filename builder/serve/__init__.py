"""Serving: a tritonserver process over a trtspec model repository (`server`), reused by `trtspec serve`,
the Triton integration tests and the benchmarks."""
