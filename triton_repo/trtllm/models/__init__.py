"""Standalone Triton Python-backend model files, copied into rendered repositories as `<model>/1/model.py`.

They import only numpy, triton_python_backend_utils and transformers (NVIDIA's container has no trtspec),
so nothing here is imported by trtspec itself. `fake_tensorrt_llm.py` is a CPU stand-in for tests only.
"""
