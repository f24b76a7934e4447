"""The n-gram tuner (`TUNER`, named by builder/speculative/ngram/method.py): settings scored by replaying greedy
decodes against the step curve.

An n-gram draft depends on the text alone, and greedy verification accepts a draft's leading tokens that equal
the target's greedy continuation. So one greedy decode per calibration prompt (the torch reference, a little
longer than asked, so every step's bonus token is known) fixes what any setting would draft and accept at every
step: `replay` runs the real drafter (`NgramDrafter` with its budget, as the decoding loop runs it) over those
texts and charges each step the curve's cost of its own tree size T, c(b, T) plus the host's base share. No
setting is decoded; `tests/unit/test_tune_ngram.py` checks the replay against the decoding loop, step by step.

A setting's score is then exact for these prompts: E[τ] = tokens / steps and c = Σ c(b, T_step) / steps (one
number per setting, as `Scored` wants; the draft length varies per step, which is why the static tuners' one
tree per setting does not describe n-gram). Candidates: max_draft over `DRAFTS` (and the room the engine has),
suffix lengths over `MATCHES`, the recipe's own candidates and adaptive flag, the shared pool off and — where the
recipe allows it (shared_pool: true) — on, and the recipe's setting. With the pool the texts replay in order
through one pool, as requests one after another fill it; whether its drafts pay depends on the curve (a short chain
costs little more than a plain step when the step is memory-bound, ~2× on the tiny fixture with AVX2), so the
tuner keeps it only where it scores higher, and never turns on a pool the recipe did not allow (at batch b > 1 the
pool is the sequential replay's, an approximation: texts decoding side by side would not see each other's). At batch
size b the texts decode b at a time and each step is charged c(rows, its widest row's T), as a batch pads to its
widest draft; the draft schedule's budgets are the pick replayed with a node cap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from builder.speculative.ngram.config import NgramConfig, ngram_nodes
from builder.tune.calibrate import Calibration
from builder.tune.choose import Scored, best
from builder.tune.costs import Host
from builder.tune.curve import StepCurve
from builder.tune.tuners import Tuned, Tuner, off_option, section_fields

if TYPE_CHECKING:
    from builder.speculative.ngram.pool import SharedPool

DRAFTS = (4, 8, 12, 16, 23)  # max_draft candidates (those the engine's room allows), with the room itself
MATCHES = ((3, 1), (3, 2), (4, 1), (4, 2), (5, 1), (5, 2), (5, 3))  # (max_match, min_match) candidates
BUDGETS = (2, 3, 5, 9, 17)  # node caps tried for the draft schedule (below the pick's nodes)
KEYS = ("max_draft", "max_match", "min_match", "candidates", "adaptive", "shared_pool")  # a setting's fields


@dataclass(frozen=True)
class Replayed:
    """One setting replayed over the calibration texts."""

    steps: int
    tokens: int  # emitted after the prefill's token (τ = tokens / steps)
    nodes: tuple[int, ...]  # each step's tree size T (root included)
    accepted: tuple[int, ...]  # each step's accepted drafts (the decoding loop's accepted_per_step, concatenated)
    lengths: tuple[int, ...] = ()  # steps per text (`nodes` and `accepted` are the texts' steps, one after another)

    def per_text(self) -> list[tuple[int, ...]]:
        """`nodes` split by text."""
        out, at = [], 0
        for n in self.lengths:
            out.append(self.nodes[at : at + n])
            at += n
        return out

    @property
    def tau(self) -> float:
        return self.tokens / max(self.steps, 1)


def replay(
    texts: Sequence[tuple[Sequence[int], Sequence[int]]],
    setting: dict[str, Any],
    max_new: int,
    budget: int | None = None,
    pool: SharedPool | None = None,
) -> Replayed:
    """Each (prompt, greedy output) decoded to `max_new` tokens as the decoding loop would with this n-gram
    setting (batch 1, greedy, no stop tokens): the output must hold max_new + max_draft tokens or the text's end.
    `pool`: a `SharedPool` the texts start from instead of an empty one (a setting with shared_pool only; e.g. a
    datastore of other text, `scripts/bench_tiny_limits.py`)."""
    from builder.speculative.ngram.drafter import NgramFactory
    from builder.speculative.protocols import PrefillResult

    steps = tokens = 0
    nodes: list[int] = []
    accepted: list[int] = []
    lengths: list[int] = []
    factory = NgramFactory(NgramConfig(method="ngram", **setting))  # one pool for every text (with shared_pool)
    if pool is not None:
        if factory.pool is None:
            raise ValueError("replay: a starting pool needs a setting with shared_pool")
        factory.pool = pool
    for seq, (prompt, out) in enumerate(texts):
        first = steps
        drafter = factory()
        drafter.set_budget(budget)
        drafter.start([seq], [list(prompt)], PrefillResult(None, []))  # type: ignore[arg-type] - unused by n-gram
        done = 1  # the prefill's token, out[0]
        while done < max_new:
            root = done - 1  # out[root] is the newest emitted token
            draft = drafter.propose([seq], [int(out[root])])[0]
            toks, best_n = draft.tokens.tolist(), 0
            for path in draft.paths.tolist():  # the longest accepted prefix of any path (greedy verification)
                n = 0
                while (
                    n + 1 < len(path)
                    and path[n + 1] >= 0
                    and root + 1 + n < len(out)
                    and toks[path[n + 1]] == out[root + 1 + n]
                ):
                    n += 1
                best_n = max(best_n, n)
            if root + 1 + best_n >= len(out):
                raise ValueError(f"replay ran past the greedy output of prompt {seq}: decode it longer")
            emitted = [int(t) for t in out[root + 1 : root + 2 + best_n]]
            drafter.update_emitted(seq, emitted, draft.width - 1)
            done += len(emitted)
            steps, tokens = steps + 1, tokens + len(emitted)
            nodes.append(draft.num_nodes)
            accepted.append(best_n)
        drafter.release(seq)
        lengths.append(steps - first)
    return Replayed(steps, tokens, tuple(nodes), tuple(accepted), tuple(lengths))


def score(r: Replayed, curve: StepCurve, batch: int, host: Host, setting: dict[str, Any]) -> Scored:
    """The setting's E[τ] and mean c over its replayed steps. Batch 1: each step charged c(1, its T) + host base.
    Batch b: the texts decode in groups of b, side by side from their first steps; a group's step k holds the rows
    still decoding and costs c(rows, the largest T among them) + host base (a batch pads to its widest draft);
    E[τ] = tokens per row and step, c = ms per batch step (so E[τ] / c is per row, as speculation off's)."""
    nodes = ngram_nodes(setting["max_draft"], setting["candidates"])
    if batch == 1:
        cost = sum(curve.target_ms(1, t) for t in r.nodes) / max(r.steps, 1) + host.ms(1, 0)
        return Scored(nodes, r.tau, cost, setting)
    per, ms, batch_steps = r.per_text(), 0.0, 0
    for g in range(0, len(per), batch):
        group = per[g : g + batch]
        for k in range(max((len(x) for x in group), default=0)):
            live = [x[k] for x in group if k < len(x)]
            ms += curve.target_ms(len(live), max(live)) + host.ms(len(live), 0)
            batch_steps += 1
    return Scored(nodes, r.tau, ms / max(batch_steps, 1), setting)


def grid(current: dict[str, Any], room: int) -> list[dict[str, Any]]:
    """The candidate settings within `room` nodes (the recipe's own first)."""
    c, adaptive, shared = current["candidates"], current["adaptive"], current.get("shared_pool", False)
    drafts = sorted({k for k in (*DRAFTS, (room - 1) // c) if 1 <= k and ngram_nodes(k, c) <= room})
    out = [dict(current)] if ngram_nodes(current["max_draft"], c) <= room else []
    for pool in (True, False) if shared else (False,):
        for k in drafts:
            for big, small in MATCHES:
                s = {
                    "max_draft": k,
                    "max_match": big,
                    "min_match": small,
                    "candidates": c,
                    "adaptive": adaptive,
                    "shared_pool": pool,
                }
                if s not in out:
                    out.append(s)
    return out


def greedy_texts(cal: Calibration, extra: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, greedy output of max_new + extra tokens) per calibration prompt (the torch reference)."""
    from builder.speculative.decoding import generate

    engine = cal.engine()
    return [(p, generate(engine, p, cal.max_new + extra).token_ids) for p in cal.prompts]


def tune_ngram(tuner: Tuner, cal: Calibration, curve: StepCurve, room: int, host: Host, say: Any) -> Tuned:
    """`Tuned` of the n-gram recipe: every `grid` setting replayed and scored at batch 1; the draft schedule's
    options at batch b: speculation off and the pick under each node cap in BUDGETS."""
    current = tuner.current(cal.loaded)
    settings = grid(current, room)
    say(f"calibration: greedy decodes of {len(cal.prompts)} prompts, then {len(settings)} n-gram settings replayed")
    texts = greedy_texts(cal, max(s["max_draft"] for s in settings) + 1)
    runs = [(s, replay(texts, s, cal.max_new)) for s in settings]
    table = [score(r, curve, 1, host, s) for s, r in runs]
    pick = best(table)
    cur = table[0] if settings and settings[0] == current else pick
    capped: dict[int, Replayed] = {n: replay(texts, pick.setting, cal.max_new, n) for n in BUDGETS if n < pick.nodes}
    full = next(r for s, r in runs if s == pick.setting)

    def options(b: int) -> list[Scored]:
        capped_rows = [
            Scored(n, r.tau, score(r, curve, b, host, pick.setting).cost_ms, pick.setting) for n, r in capped.items()
        ]
        return [off_option(curve, b, host), *capped_rows, score(full, curve, b, host, pick.setting)]

    hist: dict[int, int] = {}
    for t in full.nodes:
        hist[t] = hist.get(t, 0) + 1
    stats = {
        "settings_measured": len(settings),
        "replayed_steps": full.steps,
        "nodes_per_step": {str(t): round(n / full.steps, 4) for t, n in sorted(hist.items())},
    }
    return Tuned(pick, cur, table, options, stats)


current, overlay = section_fields(KEYS)


# The replay charges each step its own tree size (`score`); the cost model's formula (units, graph_ms) is the plain
# step, and the drafter's host work, a lookup per step whatever the setting, is charged as the base share (small None).
TUNER = Tuner(
    key="ngram",
    search=tune_ngram,
    current=current,
    overlay=overlay,
    units=lambda _s: 0,
    graph_ms=lambda _s, curve, batch, _tau: curve.target_ms(batch, 1),
)
