"""Lookahead decoding: zero-weight drafter (Jacobi window + n-gram pool).

pool.py     NgramPool — n-grams keyed by first token, deduplicated, bounded; verification sets.
window.py   Window, step_layout, advance_window — the window, the step's nodes/mask/depth/paths.
drafter.py  LookaheadDrafter — the `Drafter` protocol over the two.
config.py   the recipe section (W, N, G).
"""
