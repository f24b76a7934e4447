"""The torch reference face of `tree_verify`: a re-export, so there is one copy of the algorithm."""

from builder.speculative.verify import VerifyResult, tree_verify

__all__ = ["VerifyResult", "tree_verify"]
