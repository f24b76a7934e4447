"""trtspec: Llama 3 + speculative decoding → FP8 engines → Triton model repositories.

Importing this package is cheap: no torch, tensorrt, tensorrt_llm or triton at module level.
"""

__version__ = "0.1.0"
