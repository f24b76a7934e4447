"""N-gram (prompt-lookup) speculation: zero weights, drafts copied from the sequence's own text.

config.py   the recipe section (max_draft, max_match, min_match, candidates) and the `--method ngram` default.
drafter.py  NgramDrafter — the `Drafter` protocol: suffix-match index per sequence, candidates as one tree.
"""
