"""Greedy speculative decoding is lossless: every method == plain greedy == HF transformers.

Random-weight tiny Llama 3 (GQA 4q/2kv, rope θ 500000) with random Medusa heads and a random EAGLE
draft; 20 prompts × 64 new tokens per method, one request at a time and 4 requests of different
lengths batched (n-gram also with a shared pool, where later requests draft from released ones' texts; EAGLE
also over a draft vocabulary of half the tokens).
fp32 equality is the rule; a mismatch is accepted only at a demonstrated near-tie
(`tests/unit/numerics.assert_near_tie`: both tokens within the fp32 error bound of the float64 top
logit of HF), and reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from builder.engines.torch_eagle import TorchEagleNet
from builder.engines.torch_engine import TorchEngine
from builder.model.llama import Llama
from builder.model.loader import load_model
from builder.speculative.choices import load_choices
from builder.speculative.decoding import Decoder, Request, generate
from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter
from builder.speculative.eagle.tree import static_tree
from builder.speculative.lookahead.drafter import LookaheadDrafter
from builder.speculative.medusa.drafter import MedusaDrafter
from builder.speculative.ngram.config import NgramConfig
from builder.speculative.ngram.drafter import NgramDrafter, NgramFactory
from builder.speculative.protocols import Draft
from builder.speculative.tree import tree_from_choices
from tests.unit.engine_cases import draft_from
from tests.unit.model_utils import hf_float64, hf_greedy_continuations
from tests.unit.numerics import assert_near_tie
from tests.unit.speculative_models import make_hf_llama, random_eagle, random_medusa

NEW = 64
MC = load_choices("mc_sim_7b_63")
BATCH = 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = make_hf_llama(tmp_path_factory.mktemp("tiny") / "model")
    model = load_model(path)
    rng = np.random.default_rng(123)
    prompts = [[int(t) for t in rng.integers(3, 512, int(n))] for n in rng.integers(2, 40, 20)]
    return path, model, prompts


@pytest.fixture(scope="module")
def hf_pair(setup):
    """HF's model in fp32 (greedy oracle) and in float64 (to judge near-ties)."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(setup[0], torch_dtype=torch.float32, attn_implementation="sdpa").eval()
    return model, hf_float64(model)


@pytest.fixture(scope="module")
def hf_greedy(setup, hf_pair):
    _, _, prompts = setup
    model = hf_pair[0]
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return hf_greedy_continuations(model, prompts, NEW)


def assert_lossless(hf_pair, prompt: list[int], ref: list[int], got: list[int], label: str) -> None:
    """got == ref, or the first difference sits at a near-tie of HF (judged in float64)."""
    if got == ref:
        return
    i = next((k for k, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
    assert i < min(len(ref), len(got)), f"{label}: lengths differ ({len(got)} vs {len(ref)}) with equal prefixes"
    ids = torch.tensor([prompt + ref[:i]])
    with torch.no_grad():
        logits, logits64 = (m(ids).logits[0, -1] for m in hf_pair)
    assert_near_tie(got[i], ref[i], logits, logits64, what=f"{label}: token {i}")


MAX_SEQ = 512
EAGLE2 = DynamicSpec(depth=5, top_k=8, total_nodes=32)


def make_method(kind: str, model: Llama, method: str, batch: int, cache: Path) -> tuple[Any, Callable]:
    """An engine ("torch" reference or "onnxruntime") and a drafter factory for a method on the random model."""
    from devtools.ort_engines import eagle_net, target_engine

    medusa = tree = None
    bits = None  # block-quantized draft weights (ONNX Runtime only: builder.export.nbits)
    for suffix, b in (("-int8", 8), ("-int4", 4)):
        if method.endswith(suffix):
            assert kind == "onnxruntime", "quantized draft weights are an ONNX Runtime graph rewrite"
            method, bits = method.removesuffix(suffix), b
    if method == "medusa":
        tree = tree_from_choices(MC)
        medusa = dict(medusa=random_medusa(model), medusa_topk=int(tree.rank.max()) + 1)
        if bits is not None:
            medusa["medusa_nbits"] = bits
    nodes = {
        "none": 1,
        "lookahead": LookaheadDrafter(4, 4, 4).max_nodes,
        "eagle2": EAGLE2.total_nodes + 1,
        "ngram": NgramDrafter(*NGRAM).max_nodes,
        "ngram-shared": NgramDrafter(*NGRAM).max_nodes,
    }.get(method, 64)
    if kind == "torch":
        engine: Any = TorchEngine(model, max_seq_len=MAX_SEQ, max_batch_size=batch, **(medusa or {}))
    else:
        engine = target_engine(
            model, cache, max_seq_len=MAX_SEQ, max_nodes=nodes, max_batch_size=batch, **(medusa or {})
        )
    if method in ("none", "lookahead", "medusa", "ngram", "ngram-shared"):
        return engine, {
            "none": lambda: None,
            "lookahead": lambda: LookaheadDrafter(4, 4, 4),
            "medusa": lambda: MedusaDrafter(tree),
            "ngram": lambda: NgramDrafter(*NGRAM),
            "ngram-shared": NgramFactory(
                NgramConfig(
                    method="ngram",
                    **dict(zip(("max_draft", "max_match", "min_match", "candidates"), NGRAM)),
                    adaptive=True,
                    shared_pool=True,
                )
            ),
        }[method]
    draft = random_eagle(model)
    if method.endswith("-vocab"):  # a draft vocabulary: a random half of the tokens (builder.speculative.eagle.vocab)
        V = model.cfg.vocab_size
        draft.set_draft_vocab(np.sort(np.random.default_rng(7).choice(V, V // 2, replace=False)))
        method = method.removesuffix("-vocab")
    shape = static_tree(MC) if method == "eagle1" else EAGLE2
    top_k, tentative = (int(shape.rank.max()) + 1, 64) if method == "eagle1" else (8, EAGLE2.depth * EAGLE2.top_k)
    if kind == "torch":
        net: Any = TorchEagleNet(draft, top_k, MAX_SEQ + tentative + 1, batch)
    else:
        net = eagle_net(
            draft,
            model.lm_head.weight,
            cache,
            top_k=top_k,
            capacity=MAX_SEQ + tentative + 1,
            max_batch_size=batch,
            nbits=bits,
        )
    return engine, lambda: EagleDrafter(net, shape)


def torch_method(model: Llama, method: str, batch: int = 1) -> tuple[TorchEngine, Callable]:
    return make_method("torch", model, method, batch, Path())


METHODS = ["medusa", "eagle1", "eagle2", "eagle1-vocab", "eagle2-vocab", "lookahead", "ngram", "ngram-shared"]
QUANTIZED = ["medusa-int8", "eagle1-int8", "eagle2-vocab-int4"]  # drafts over block-quantized weights (ORT only)
NGRAM = (8, 4, 1, 2)  # two candidates: its drafts are trees, not only chains
ENGINES = ["torch", "onnxruntime"]


@pytest.fixture(scope="module")
def ort_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ort-exports")


@pytest.mark.parametrize("kind", ENGINES)
def test_plain_greedy_equals_hf(setup, hf_pair, hf_greedy, ort_cache, kind):
    _, model, prompts = setup
    engine, _ = make_method(kind, model, "none", 1, ort_cache)
    for p, ref in zip(prompts, hf_greedy):
        assert_lossless(hf_pair, p, ref, generate(engine, p, NEW).token_ids, f"{kind} plain")


CASES = [(kind, m) for kind in ENGINES for m in METHODS] + [("onnxruntime", m) for m in QUANTIZED]


@pytest.mark.parametrize("kind,method", CASES)
def test_speculative_equals_plain_and_hf(setup, hf_pair, hf_greedy, ort_cache, method, kind):
    _, model, prompts = setup
    engine, make = make_method(kind, model, method, 1, ort_cache)
    steps = 0
    for p, ref in zip(prompts, hf_greedy):
        g = generate(engine, p, NEW, make())
        assert len(g.token_ids) == NEW
        assert_lossless(hf_pair, p, ref, g.token_ids, f"{kind} {method} prompt {p[:4]}")
        steps += g.steps
    assert steps <= len(prompts) * (NEW - 1)  # never more target steps than plain decoding


@pytest.mark.parametrize("kind,method", [(kind, "none") for kind in ENGINES] + CASES)
def test_batched_requests_equal_hf(setup, hf_pair, hf_greedy, ort_cache, method, kind):
    """All 20 prompts through one Decoder with 4 slots (requests join as others finish)."""
    _, model, prompts = setup
    engine, make = make_method(kind, model, method, BATCH, ort_cache)
    lengths = [NEW - (i % 3) * 7 for i in range(len(prompts))]  # different lengths: slots free at different steps
    gens = Decoder(engine, make()).run([Request(tuple(p), n) for p, n in zip(prompts, lengths)])
    for p, ref, n, g in zip(prompts, hf_greedy, lengths, gens):
        assert_lossless(hf_pair, p, ref[:n], g.token_ids, f"{kind} {method} batched")


class ChainDrafter:
    """A chain of `depth` tokens for one sequence: the known future (perfect) or uniformly random tokens."""

    def __init__(self, depth: int, future: list[int] | None = None, vocab: int = 512, seed: int = 0):
        self.depth, self.future, self.vocab = depth, future, vocab
        self.rng = np.random.default_rng(seed)
        self.done: dict[int, int] = {}  # tokens emitted so far per sequence
        self.max_nodes = depth + 1

    def start(self, seqs, prompts, prefill) -> None:
        for s in seqs:
            self.done[s] = 1  # the first token comes from prefill

    def propose(self, seqs, roots) -> list[Draft]:
        out = []
        for s, root in zip(seqs, roots):
            if self.future is not None:
                nxt = self.future[self.done[s] : self.done[s] + self.depth]
            else:
                nxt = self.rng.integers(0, self.vocab, self.depth).tolist()
            out.append(draft_from(list(range(-1, len(nxt))), [root, *nxt]))
        return out

    def update(self, seqs, drafts, result) -> None:
        for row, s in enumerate(seqs):
            self.done[s] += int(result.accepted_len[row])

    def release(self, seq) -> None:
        self.done.pop(seq, None)


def test_perfect_drafter_accepts_every_node(setup, hf_greedy):
    _, model, prompts = setup
    engine, _ = torch_method(model, "none")
    for p, ref in zip(prompts[:5], hf_greedy[:5]):
        g = generate(engine, p, NEW, ChainDrafter(5, future=ref))
        assert g.token_ids == ref
        full = g.accepted_per_step[:-1]  # the last step may be cut short by the end of ref
        assert full and all(a == 5 for a in full), g.accepted_per_step
        assert g.tau > 5.5


def test_random_drafter_accepts_almost_nothing_and_stays_lossless(setup, hf_pair, hf_greedy):
    _, model, prompts = setup
    engine, _ = torch_method(model, "none")
    accepted, steps = 0, 0
    for i, (p, ref) in enumerate(zip(prompts, hf_greedy)):
        g = generate(engine, p, NEW, ChainDrafter(4, seed=i))
        assert_lossless(hf_pair, p, ref, g.token_ids, "random")
        accepted += sum(g.accepted_per_step)
        steps += g.steps
    assert accepted / steps < 0.05  # ~1/512 per node expected


def test_stop_token_ends_generation(setup, hf_greedy):
    _, model, prompts = setup
    engine, _ = torch_method(model, "none")
    ref = hf_greedy[0]
    stop = ref[10]
    g = generate(engine, prompts[0], NEW, LookaheadDrafter(4, 4, 4), stop_ids=[stop])
    assert g.token_ids == ref[: ref.index(stop) + 1] and g.finish_reason == "stop"
