"""N-gram (prompt-lookup) speculation: zero weights, drafts copied from the sequence's own text.

config.py   the recipe section (max_draft, max_match, min_match, candidates, adaptive, shared_pool) and the
            `--method ngram` default.
drafter.py  NgramDrafter — the `Drafter` protocol: suffix-match index per sequence, candidates as one tree;
            NgramFactory (drafters of one setting sharing one pool).
pool.py     SharedPool — released sequences' texts, looked up where a sequence's own text has no match.
"""
