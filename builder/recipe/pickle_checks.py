"""The pickle opt-in rule: a local checkpoint whose only weights are upstream's pickled files needs
`model.allow_pickle` / `speculative.allow_pickle` — refused here, at validate / plan time, before any stage runs.

Hub checkpoints (hf://) are not read by validate; the load stage's loaders refuse them the same way
(`builder.model.pickled` holds the names, for both).
"""

from __future__ import annotations

from builder.errors import UserError
from builder.model.pickled import LAYOUTS, opt_in_error, pickle_to_read
from builder.recipe.findings import Findings
from builder.recipe.resolve import parse_checkpoint


def check_pickles(c: Findings) -> None:
    recipe = c.recipe
    spec = recipe.speculative
    checked = [("model", recipe.model.checkpoint, "model", recipe.model.allow_pickle)]
    if spec.method in ("medusa", "eagle"):
        checked.append(("speculative", spec.checkpoint, spec.method, spec.allow_pickle))
    for section, text, role, allowed in checked:
        try:
            ref = parse_checkpoint(text, c.loaded.dir_of((section, "checkpoint")))
        except (UserError, RuntimeError):  # RuntimeError: Path.resolve on a symlink loop (Python < 3.13)
            continue  # the checkpoints rule reports a malformed reference; not a second time here
        if allowed or ref.local is None or not ref.local.is_dir():
            continue
        pickled = pickle_to_read(ref.local, LAYOUTS[role])
        if pickled is not None:
            err = opt_in_error(pickled, f"{section}.allow_pickle")
            c.add((section, "allow_pickle"), err.message.replace(pickled.name, str(pickled), 1), err.allowed)
