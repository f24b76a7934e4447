"""EAGLE-3 as a method: a one-layer draft over [token embedding; fc(three target hidden states)] with its own norm
and LM head over a draft vocabulary (`config`, `checkpoint`, `draft_model`). It drafts with EAGLE's tree code
(`builder.speculative.eagle.drafter`: static trees and chains, EAGLE-2's dynamic expansion, the draft budget) over
the same draft-graph contract: the target step returns the draft's features (`Method.target_features`).

TensorRT-LLM: its engine flow (trtllm-build) never had EAGLE-3 (`EagleForCausalLM` is EAGLE-1/2); its PyTorch flow
(LLM API, trtllm-serve, Triton `llmapi`) serves it as `decoding_type: Eagle3`.
"""

# trtllm: the method's TensorRT-LLM mapping (method.Trtllm): not in the engine flow, Eagle3 in the PyTorch flow

from __future__ import annotations

from typing import Any

from builder.model.pickled import EAGLE3
from builder.speculative.eagle.method import check_tree_size, tree_drafter, tree_facts
from builder.speculative.eagle3.config import Eagle3Config
from builder.speculative.method import (
    DRAFT_GRAPH,
    Checks,
    DraftCheckpoint,
    Facts,
    Method,
    NotServed,
    PytorchFlow,
    Trtllm,
    resolve,
)


def facts(c: Eagle3Config) -> Facts:
    return tree_facts(c.tree, "eagle-3" + (f"({c.draft_weights})" if c.draft_weights else ""))  # EAGLE's trees


def tree_path(c: Eagle3Config) -> tuple[str, ...] | None:
    return ("tree", "choices") if c.tree.type == "static" else None


def check(c: Eagle3Config, checks: Checks) -> None:
    """A dynamic tree no larger than its levels can produce; aux layers inside the target."""
    check_tree_size(c.tree, checks)
    arch = checks.recipe.model.architecture
    if c.aux_layers is not None and arch is not None:
        n = arch.num_layers
        ids = c.aux_layers
        if len(set(ids)) != 3 or min(ids) < 0 or max(ids) >= n:
            checks.add(
                ("speculative", "aux_layers"),
                f"aux_layers {ids} must be three distinct layers of the {n}-layer target (output-of-layer ids)",
                allowed=f"three distinct ids in 0..{n - 1}",
            )


def check_draft(c: Eagle3Config, f: Facts, checks: Checks) -> None:
    return None  # the draft vocabulary is the checkpoint's (d2t), checked when it is read


def check_config(c: Eagle3Config, cfg: dict[str, Any], checks: Checks) -> None:
    """The recipe against the draft's checkpoint (`builder.speculative.eagle3.checkpoint.check_recipe`), resolved by
    its dotted path: serving reads methods, never checkpoints, so the repository's runtime copy must not reach the
    checkpoint code through an import (`DraftCheckpoint`)."""
    resolve("builder.speculative.eagle3.checkpoint:check_recipe")(c, cfg, checks)


def make_drafter(c: Eagle3Config, net):
    if net is None:
        raise ValueError("EAGLE-3 needs its draft network")
    return tree_drafter(c.tree, net)


METHOD = Method(
    name="eagle3",
    config=Eagle3Config,
    summary="EAGLE-3: a one-layer draft over three target hidden states, own LM head over a draft vocabulary",
    facts=facts,
    make_drafter=make_drafter,
    tree_path=tree_path,
    check=check,
    check_draft=check_draft,
    draft=DraftCheckpoint(
        what="EAGLE-3 draft",
        module="eagle3_draft",
        layout=EAGLE3,
        loader="builder.speculative.eagle3.draft_model:load_for_recipe",
        checker="builder.speculative.eagle3.draft_model:check_folder",
        check_config=check_config,
    ),
    exports=DRAFT_GRAPH,
    target_features=True,
    export_draft="builder.export.eagle3:export_eagle3",
    torch_net="builder.engines.torch_eagle:TorchEagleNet",
    tune="builder.tune.eagle3:EAGLE3",
    memory="builder.plan.eagle3:MEMORY",
    trtllm=Trtllm(
        engine=NotServed(
            "TensorRT-LLM's engine flow (trtllm-build, 1.2 and before) never had EAGLE-3: its EagleForCausalLM is "
            "EAGLE-1/2; EAGLE-3 is served by the PyTorch flow (LLM API, trtllm-serve; NVIDIA/TensorRT-LLM issue "
            "#10396) — use target.backend: trtllm-llmapi"
        ),
        pytorch=PytorchFlow("Eagle3"),
    ),
)
