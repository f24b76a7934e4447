"""Draft training: the loops that fit Medusa heads and an EAGLE-1 draft to a target model's own greedy output.

distill.py   self-distillation data: the target's greedy continuations with its final hidden states
medusa.py    Medusa heads (`train_medusa`) and their per-anchor ranks on held-out sequences
eagle.py     the EAGLE-1 draft (`train_eagle`, unrolled) and its per-step ranks
schedule.py  the learning-rate schedule they share

The fixture factory (`devtools.fixture`) trains the committed tiny fixture's drafters with them; each loop takes
its sizes and schedule as one settings object (`MedusaTraining`, `EagleTraining`) and a log callback.
"""
