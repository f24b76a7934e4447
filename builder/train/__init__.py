"""Draft training: the loops that fit Medusa heads and EAGLE drafts to a target model's own output.

distill.py          self-distillation data: the target's greedy continuations with its final hidden states
medusa.py           Medusa heads (`train_medusa`) and their per-anchor ranks on held-out sequences
eagle.py            the EAGLE-1 draft (`train_eagle`, unrolled) and its per-step ranks
schedule.py         the learning-rate schedule they share

`trtspec train-draft RECIPE` (NVIDIA modelopt's speculative module; checkpoints, resume):
train_draft.py      the run: checks, key, data, the method's trainer, the draft written whole
draft_data.py       the training rows (the recipe's `draft_training.source`, the target's own responses) and their order
runner.py           the optimizer loop, its checkpoints and resume in a work folder beside the output
eagle3.py           EAGLE-3 with modelopt, corrected to SafeAILab's draft-layer math, exported as SafeAILab's layout
medusa_modelopt.py  Medusa heads with modelopt, in FasterDecoding's layout

The fixture factory (`devtools.fixture`) trains the committed tiny fixture's drafters with the first loops, each
taking its sizes and schedule as one settings object (`MedusaTraining`, `EagleTraining`) and a log callback; the
fixtures' EAGLE-3 drafts come from `trtspec train-draft` (`devtools.fixture.eagle3`).
"""
