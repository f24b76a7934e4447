"""tree_verify: fused argmax / sampling + path acceptance over each sequence's tree.

One contract (`contract.py`), four faces: the torch reference (`reference.py`), an OpenAI Triton
kernel (`kernel.py`), an ONNX custom op `trtspec::TreeVerify` with an ONNX Runtime decomposition
(`onnx_op.py`), and a TensorRT plugin (`trt_plugin.py`, GPU hosts). The bottom layer: it imports
nothing from `builder` (its checks live in `devtools.verify_cases`). Importing this package imports
nothing heavy; each face imports its library itself.
"""
