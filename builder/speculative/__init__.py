"""Speculative decoding: trees, drafters, verification and the decoding loop.

Glossary — the one vocabulary used across trtspec (code, docs, CLI output). No synonyms.

target
    The model whose output distribution must be preserved (Llama 3, possibly FP8).
draft
    The tokens proposed for one step, before the target has checked them. A *drafter* makes them:
    Medusa heads, an EAGLE draft layer, or Lookahead's n-gram pool (zero weights).
tree
    The shape of one step's draft: a rooted tree whose nodes are tokens. Node 0 is the *root*: the
    last token already accepted (its logits predict the first draft level). A static tree is given
    as *choices* (Medusa notation: each choice is a tuple of top-k ranks, one per depth).
node
    One position of the tree. Each node has a token, a parent (-1 for the root), a depth (root = 0)
    and a position id = (sequence length before the step) + depth.
path
    A root-to-leaf chain of nodes, written as node indices [0, n1, n2, …] padded with -1.
step
    One target forward pass over all nodes of a tree (tree attention: each node attends to the
    committed sequence and to its ancestors only), followed by verification.
accepted
    The longest prefix of some path whose draft tokens the target agrees with (greedy: equal to the
    target's argmax at the parent; rejection mode: passed the rejection test).
bonus token
    The token the target itself produces at the last accepted node. Every step emits it, so a step
    emits accepted + 1 ≥ 1 tokens.
acceptance length (τ)
    Tokens emitted per target step, averaged over a generation (bonus token included; τ = 1 means
    speculation bought nothing).
window, ngram, verification set (Lookahead)
    Lookahead keeps a Jacobi *window* of W future positions × (N-1) levels, harvests *ngrams* of
    length N from it into a pool keyed by their first token, and offers at most G pool entries that
    start with the last accepted token as the *verification set* (the step's draft).

One step, where to read it: `decoding.Decoder.step` (the algorithm: budget, propose, one engine step, accept,
update, emit, retire) over the interfaces in `protocols` (engines, drafters, their optional capabilities), the
per-sequence state and stop rules in `sequence`, the fast paths beside the reference in `fast_paths`, and the engine
host side in `builder.engines.batched`.
"""
