"""Shared by the TensorRT-LLM checkpoint writer's tests (`test_trtllm_checkpoint.py`,
`test_trtllm_checkpoint_layout.py`): the sources (the trained tiny fixture, 8 q / 2 kv heads, and a random
unseen Llama with one KV head, a padded vocabulary, Llama 3.1 RoPE scaling and a sharded index, saved once per
session in a scratch folder), the conversions (cached per source, split and method), the raw rank files (read
with plain safetensors, not with the reader under test) and HF transformers' greedy references.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from builder.trtllm.checkpoint import CheckpointRequest, convert_checkpoint
from tests.unit.model_utils import hf_greedy_continuations
from tests.unit.scratch import scratch_dir

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "tiny-llama3"
SPLITS = [(tp, pp) for tp in (1, 2, 4) for pp in (1, 2)]
NEW, PROMPTS = 32, 4
TRTLLM_1_2_RC2 = "b35ac1b64368513d215c57d2ed01d62d910df8da"  # NVIDIA/TensorRT-LLM, version.py "1.2.0rc2"


@functools.lru_cache(maxsize=None)
def workdir() -> Path:
    return scratch_dir("trtspec-trtllm-ckpt-")


@functools.lru_cache(maxsize=None)
def random_model() -> tuple[Path, Path, Path]:
    """(target, Medusa heads, EAGLE draft) of a random unseen Llama, saved in the upstream layouts."""
    from builder.model.loader import load_model
    from tests.unit.speculative_models import random_eagle
    from tests.unit.trtllm_models import random_heads, save_eagle, save_medusa, save_random_target

    root = workdir() / "random"
    target = save_random_target(root / "base")
    model = load_model(target)
    medusa = save_medusa(random_heads(model.cfg.hidden_size, model.cfg.vocab_size), root / "medusa")
    eagle = save_eagle(random_eagle(model), root / "eagle")
    return target, medusa, eagle


def sources(which: str) -> tuple[Path, Path, Path]:
    return (FIX / "base", FIX / "medusa", FIX / "eagle") if which == "fixture" else random_model()


EAGLE_TREE = {
    "eagle1": dict(eagle_version=1, num_eagle_layers=3, max_non_leaves_per_layer=3, max_draft_len=12),
    "eagle2": dict(
        eagle_version=2, num_eagle_layers=5, max_non_leaves_per_layer=3, max_draft_len=12, eagle_dynamic_top_k=3
    ),
}


def request(which: str, tp: int, pp: int, method: str, **kw) -> CheckpointRequest:
    base, medusa, eagle = sources(which)
    extra: dict = {"medusa": dict(draft_dir=medusa, max_draft_len=12), "lookahead": dict(max_draft_len=26)}
    extra = extra.get(method, {})
    if method in EAGLE_TREE:
        extra = dict(draft_dir=eagle, **EAGLE_TREE[method])
    return CheckpointRequest(base, tp, pp, "float32", "eagle" if method in EAGLE_TREE else method, **{**extra, **kw})


@functools.lru_cache(maxsize=None)
def converted(which: str, tp: int, pp: int, method: str) -> tuple[Path, dict]:
    out = workdir() / f"{which}-{method}-tp{tp}-pp{pp}"
    return out, convert_checkpoint(request(which, tp, pp, method), out)


def raw_rank(folder: Path, rank: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / f"rank{rank}.safetensors"))


@functools.lru_cache(maxsize=None)
def hf(which: str):
    """HF transformers' model in fp32 (greedy oracle) and a float64 copy (to judge near-ties)."""
    from transformers import LlamaForCausalLM

    from tests.unit.model_utils import hf_float64

    model = LlamaForCausalLM.from_pretrained(sources(which)[0], dtype=torch.float32, attn_implementation="sdpa").eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, hf_float64(model)


@functools.lru_cache(maxsize=None)
def prompts_and_refs(which: str) -> tuple[list[list[int]], list[list[int]]]:
    model = hf(which)[0]
    rng = np.random.default_rng(5)
    V = model.config.vocab_size
    prompts = [[int(t) for t in rng.integers(3, V, int(n))] for n in rng.integers(4, 20, PROMPTS)]
    return prompts, hf_greedy_continuations(model, prompts, NEW)
