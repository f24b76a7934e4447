"""tree_verify: fused argmax / sampling + path acceptance over a step's tree.

One contract (`contract.py`), four faces: the torch reference (`reference.py`, re-exporting
`builder.speculative.verify`), an OpenAI Triton kernel (`kernel.py`), an ONNX custom op `trtspec::TreeVerify`
with an ONNX Runtime decomposition (`onnx_op.py`), and a TensorRT plugin (`trt_plugin.py`, GPU hosts).
Importing this package imports nothing heavy; each face imports its library itself.
"""
