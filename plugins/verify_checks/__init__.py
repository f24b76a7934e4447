"""Checks of the `tree_verify` plugin's faces: random cases and their comparison with the reference
(`cases.py`), used by the unit tests of every face and by the GPU check (`devtools.gpu_check.kernel`,
run by scripts/gpu_check.sh).

A package of its own, above both `plugins.tree_verify` (the bottom layer, which imports nothing from
`builder`) and `builder.speculative` (tree buffers for the cases): dependencies flow one way. The GPU
check's driver lives in `devtools/` (development tooling, outside the product package).
"""
