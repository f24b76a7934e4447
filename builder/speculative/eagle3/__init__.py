"""EAGLE-3: a draft layer over three of the target's hidden states (low, middle, high), fused by `fc`."""
