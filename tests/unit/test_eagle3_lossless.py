"""EAGLE-3 decoding is lossless: greedy == HF transformers greedy; sampled output follows the target's law.

An unseen random 5-layer Llama (tests/unit/speculative_models.make_hf_llama) with EAGLE-3 drafts over the outputs
of layers 0, 2 and 3, each over a draft vocabulary of half the tokens (d2t): a random draft (accepts little), and one
fitted here for a few seconds to the target's own greedy continuations of the test prompts (accepts a lot: the
acceptance paths — multi-token chains, KV compaction of accepted tree branches, the draft's own outputs fed to
deeper levels — run). Through the ONNX Runtime engine (target graph with the draft's fc folded in, the EAGLE-3
draft graph) and the torch reference (`TorchEngine(features=aux)`, `TorchEagleNet`), with EAGLE's drafter over a
static chain, a static tree and EAGLE-2's dynamic tree; one request at a time, and 4 in flight under a draft budget
that shrinks with the batch. fp32 equality is the rule; a mismatch passes only at a demonstrated near-tie of HF
(`tests.unit.test_lossless.assert_lossless`).

Sampling: on a vocabulary of 8, N = 3000 two-token generations with rejection verification against the exact law
of the plain model (Pearson χ², p > 1e-4: `tests.unit.test_sampling_loop`, where the check is shown to reject a wrong
distribution).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from builder.engines.ort.eagle import OrtEagleNet
from builder.engines.ort.target import OrtEngine, TargetSpec
from builder.engines.torch_eagle import TorchEagleNet
from builder.engines.torch_engine import TorchEngine
from builder.export.eagle3 import export_eagle3
from builder.export.target import Features, export_target
from builder.model.llama import Llama, causal_mask
from builder.model.loader import load_model
from builder.speculative.decoding import Decoder, DraftSchedule, Request, generate
from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter
from builder.speculative.eagle.tree import static_tree
from builder.speculative.eagle3.draft_model import Eagle3Draft, random_draft
from tests.unit.model_utils import hf_float64, hf_greedy_continuations
from tests.unit.speculative_models import make_hf_llama
from tests.unit.test_eagle3_export import narrow_draft
from tests.unit.test_lossless import assert_lossless

AUX = (0, 2, 3)
NEW, MAX_SEQ, BATCH = 40, 128, 4
SHAPES = {
    "chain": static_tree([[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]),
    "tree": static_tree([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0, 0]]),
    "dynamic": DynamicSpec(depth=4, top_k=4, total_nodes=12),
}


def top_k_of(shape: Any) -> int:
    return shape.top_k if isinstance(shape, DynamicSpec) else int(shape.rank.max()) + 1


def tentative(shape: Any) -> int:
    return shape.depth * shape.top_k if isinstance(shape, DynamicSpec) else shape.num_nodes


# -- engines over a target and its EAGLE-3 draft ---------------------------------------------------------------------


def ort_target(model: Llama, draft: Eagle3Draft, base: Path, max_seq_len: int, max_nodes: int, batch: int):
    """The ONNX Runtime engine over `model`'s greedy and rejection graphs, `hidden` = the draft's fc of its features
    (exported into `base` once per draft)."""
    cap = max_seq_len + max_nodes
    paths = {}
    for mode in ("greedy", "rejection"):
        folder = base / f"target-{mode}-{cap}"
        if not (folder / "export.json").is_file():
            export_target(
                model,
                folder,
                variant="ort" if model.cfg.head_dim % 16 == 0 else "standard",
                mode=mode,
                max_seq_len=cap,
                features=Features(draft.aux_layers, draft.fc.weight),
            )
        paths[mode] = folder / "target.ort.onnx"
    c = model.cfg
    spec = TargetSpec(
        paths["greedy"],
        paths["rejection"],
        c.num_hidden_layers,
        c.num_key_value_heads,
        c.head_dim,
        draft.cfg.hidden_size,  # `hidden` is fc's output: the draft's width
        c.vocab_size,
        cap,
    )
    return OrtEngine(spec, max_seq_len, batch)


def ort_net(
    draft: Eagle3Draft, base: Path, top_k: int, capacity: int, batch: int, nbits: int | None = None
) -> OrtEagleNet:
    """The ONNX Runtime EAGLE-3 draft graph (its weight MatMuls block-quantized to `nbits` bits where given)."""
    folder = base / f"eagle3-k{top_k}-{capacity}{'' if nbits is None else f'-q{nbits}'}"
    if not (folder / "export.json").is_file():
        export_eagle3(
            draft,
            None,
            folder,
            variant="ort" if draft.cfg.head_dim % 16 == 0 else "standard",
            top_k=top_k,
            max_seq_len=capacity,
            nbits=nbits,
        )
    c = draft.cfg
    return OrtEagleNet(
        folder / "eagle.ort.onnx",
        layers=1,
        kv_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        hidden_size=c.hidden_size,
        top_k=top_k,
        capacity=capacity,
        max_batch_size=batch,
    )


def engine_and_drafter(
    kind: str,
    model: Llama,
    draft: Eagle3Draft,
    shape: Any,
    base: Path,
    batch: int = 1,
    max_seq_len: int = MAX_SEQ,
    nbits: int | None = None,
) -> tuple[Any, Callable[[], EagleDrafter]]:
    k, cap = top_k_of(shape), max_seq_len + tentative(shape) + 1
    if kind == "torch":
        engine: Any = TorchEngine(model, max_seq_len, batch, features=draft.aux_layers)
        net: Any = TorchEagleNet(draft, k, cap, batch)
    else:
        engine = ort_target(model, draft, base, max_seq_len, 32, batch)
        net = ort_net(draft, base, k, cap, batch, nbits)
    return engine, lambda: EagleDrafter(net, shape)


# -- a draft that accepts: fitted to the target's greedy continuations ------------------------------------------------


def fit_draft(model: Llama, draft: Eagle3Draft, sequences: list[list[int]], steps: int = 80) -> Eagle3Draft:
    """Train `draft` (fc, midlayer, norm, LM head; the embedding stays the target's) to predict t[i+2] from the
    target's features at i and t[i+1] over `sequences` (cross-entropy over the draft vocabulary), and, one level
    deeper, t[i+3] from its own output at i and t[i+2] — EAGLE-3's training-time test, two steps. Full batch, Adam."""
    ids = draft.vocab_ids
    col = torch.full((model.cfg.vocab_size,), -100, dtype=torch.int64)  # target id -> draft row (-100: ignored)
    col[ids if ids is not None else torch.arange(model.cfg.vocab_size)] = torch.arange(draft.lm_head.out_features)
    data = []
    with torch.no_grad():
        for s in sequences:
            t = torch.tensor([s])
            n = t.shape[1]
            _, feats = model(t, torch.arange(n)[None], causal_mask(n), None, 0, draft.aux_layers)  # (1, n, 3C)
            data.append((t, feats))
    params = [p for name, p in draft.named_parameters() if not name.startswith("embed_tokens")]
    opt = torch.optim.Adam(params, lr=3e-3)
    draft.train()
    for _ in range(steps):
        loss = torch.zeros(())
        for t, feats in data:
            n = t.shape[1]
            m = n - 2  # pairs (h[i], t[i+1]) predicting t[i+2], i = 0..n-3
            x1 = draft(t[:, 1 : m + 1], feats[:, :m], torch.arange(m)[None], causal_mask(m))  # (1, m, C)
            loss = loss + torch.nn.functional.cross_entropy(draft.logits(x1)[0], col[t[0, 2 : m + 2]])
            x2 = draft(t[:, 2 : m + 1], x1[:, : m - 1], torch.arange(1, m)[None], causal_mask(m - 1))
            loss = loss + 0.5 * torch.nn.functional.cross_entropy(draft.logits(x2)[0], col[t[0, 3 : m + 2]])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return draft.eval()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = make_hf_llama(tmp_path_factory.mktemp("e3") / "model", layers=5, seed=11)
    model = load_model(path)
    rng = np.random.default_rng(5)
    prompts = [[int(t) for t in rng.integers(3, 512, int(n))] for n in rng.integers(2, 30, 8)]
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="sdpa").eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = 0
    ref = hf_greedy_continuations(hf, prompts, NEW)
    return model, prompts, ref, (hf, hf_float64(hf))


@pytest.fixture(scope="module")
def drafts(setup) -> dict[str, Eagle3Draft]:
    """A random draft and a fitted one, each over a draft vocabulary of 256 of the 512 tokens (the fitted one's holds
    every token of the prompts and continuations — more than 256 if there are more — the rest drawn at random); a random one half the target's width (own
    embedding: fc [32, 192], the target graphs' `hidden` 32 wide)."""
    model, prompts, ref, _ = setup
    V, emb = model.cfg.vocab_size, model.embed_tokens.weight
    out = {
        "random": random_draft(model.cfg, AUX, draft_vocab=256, seed=3, base_embed=emb, std=0.2),
        "narrow": narrow_draft(model, model.cfg, 8, 256, AUX),
    }
    torch.manual_seed(0)
    seen = sorted({t for p, r in zip(prompts, ref) for t in p + r})
    vd = max(256, len(seen))
    fitted = random_draft(model.cfg, AUX, draft_vocab=vd, seed=4, base_embed=emb, std=0.05)
    rest = np.setdiff1d(np.arange(V), seen)
    extra = np.random.default_rng(6).choice(rest, vd - len(seen), replace=False)
    fitted.set_vocab_ids(torch.from_numpy(np.sort(np.concatenate([seen, extra]).astype(np.int64))))
    out["fitted"] = fit_draft(model, fitted, [p + r for p, r in zip(prompts, ref)])
    return out


@pytest.fixture(scope="module")
def ort_base(tmp_path_factory) -> Callable[[str], Path]:
    root = tmp_path_factory.mktemp("e3-ort")
    return lambda name: root / name


KINDS = ("torch", "onnxruntime")
CASES = [(kind, shape, which) for kind in KINDS for shape in SHAPES for which in ("random", "fitted")]
CASES += [(kind, "dynamic", "narrow") for kind in KINDS] + [("onnxruntime", "dynamic", "fitted-int8")]


@pytest.mark.parametrize("kind,shape,which", CASES)
def test_greedy_equals_hf(setup, drafts, ort_base, kind, shape, which):
    """`fitted-int8`: the fitted draft's graph with int8 block-quantized weights (`speculative.draft_weights`)."""
    model, prompts, ref, hf_pair = setup
    name, _, bits = which.partition("-int")
    nbits = int(bits) if bits else None
    engine, make = engine_and_drafter(kind, model, drafts[name], SHAPES[shape], ort_base(name), nbits=nbits)
    steps = 0
    for p, want in zip(prompts, ref):
        g = generate(engine, p, NEW, make())
        assert len(g.token_ids) == NEW
        assert_lossless(hf_pair, p, want, g.token_ids, f"{kind} {shape} {which} prompt {p[:4]}")
        steps += g.steps
    assert steps <= len(prompts) * (NEW - 1)
    if name == "fitted":  # the acceptance paths ran: most steps emit several tokens
        assert len(prompts) * NEW / steps > 2.0, f"τ {len(prompts) * NEW / steps:.2f}"


@pytest.mark.parametrize("shape", ["tree", "dynamic"])
@pytest.mark.parametrize("kind", ["torch", "onnxruntime"])
def test_batched_requests_under_a_draft_budget_equal_hf(setup, drafts, ort_base, kind, shape):
    """All prompts through one Decoder with 4 slots (requests join as others finish, different lengths), the draft
    capped by a schedule that shrinks with the batch (a truncated tree is still verified losslessly)."""
    model, prompts, ref, hf_pair = setup
    engine, make = engine_and_drafter(kind, model, drafts["fitted"], SHAPES[shape], ort_base("fitted"), BATCH)
    lengths = [NEW - (i % 3) * 7 for i in range(len(prompts))]
    dec = Decoder(engine, make(), DraftSchedule([(1, 13), (2, 6), (3, 4), (4, 3)]))
    gens = dec.run([Request(tuple(p), n) for p, n in zip(prompts, lengths)])
    for p, want, n, g in zip(prompts, ref, lengths, gens):
        assert_lossless(hf_pair, p, want[:n], g.token_ids, f"{kind} {shape} batched")
    assert sum(len(g.token_ids) for g in gens) / sum(g.steps for g in gens) > 1.5  # drafts were accepted


def test_torch_reference_and_ort_engine_accept_alike(setup, drafts, ort_base):
    """The same fitted draft through both engines: the same tokens and the same accepted lengths per step (the
    graphs compute what the reference computes, fc folded or not), unless a draft near-tie flips a proposal."""
    model, prompts, _, _ = setup
    shape = SHAPES["dynamic"]
    runs = []
    for kind in ("torch", "onnxruntime"):
        engine, make = engine_and_drafter(kind, model, drafts["fitted"], shape, ort_base("fitted"))
        runs.append([generate(engine, p, NEW, make()) for p in prompts[:4]])
    for a, b in zip(*runs):
        assert a.token_ids == b.token_ids
    same = sum(a.accepted_per_step == b.accepted_per_step for a, b in zip(*runs))
    assert same >= 3, [(a.accepted_per_step, b.accepted_per_step) for a, b in zip(*runs)]


# -- sampling ----------------------------------------------------------------------------------------------------------


def test_sampled_tokens_follow_the_target_with_rejection_verification(tmp_path):
    from tests.unit.test_sampling_loop import PROMPT, N, V, chi2_pvalue, exact_law, sample

    path = make_hf_llama(tmp_path / "v8", vocab=V, hidden=32, layers=3, heads=2, kv_heads=1, std=0.5, seed=7)
    model = load_model(path)
    assert max(PROMPT) < V
    draft = random_draft(model.cfg, (0, 1, 2), draft_vocab=6, seed=2, base_embed=model.embed_tokens.weight, std=0.5)
    shape = DynamicSpec(depth=2, top_k=2, total_nodes=4)
    engine, make = engine_and_drafter("onnxruntime", model, draft, shape, tmp_path / "ort", max_seq_len=16)
    counts = sample(engine, make, 1.0)
    p = chi2_pvalue(counts, exact_law(model, 1.0), N)
    assert p > 1e-4, f"eagle3: samples do not follow the target (χ² p = {p:.2e})"
