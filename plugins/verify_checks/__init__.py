"""Checks of the `tree_verify` plugin's faces: random cases and their comparison with the reference
(`cases.py`), the GPU check (`gpu_check.py`, run by scripts/gpu_check.sh).

A package of its own, above both `plugins.tree_verify` (the bottom layer, which imports nothing from
`builder`) and `builder.speculative` (tree buffers for the cases): dependencies flow one way.
"""
