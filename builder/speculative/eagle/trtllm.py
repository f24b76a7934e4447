"""EAGLE-1/2 on TensorRT-LLM 1.2's engine flow: what its builder and Triton backend refuse (recipe rules that
read the recipe only, run by `builder.recipe.trtllm_checks` and `builder.trtllm.build_cmd` through the method).

- triton_backend/inflight_batcher_llm/src/model_instance_state.cc @0c8de69a (`getExecutorConfigFromParams`):
  EAGLE gets `executor::EagleConfig(eagleChoices)` only — `useDynamicTree` stays false, so EAGLE-2 dynamic trees
  are not served through Triton.
- tensorrt_llm/builder.py build(): "Max batch size > 512 is not supported for EAGLE", "Max draft len > 256 is not
  supported for EAGLE"; it turns paged context FMHA on silently.
- examples/eagle/README.md: "Pipeline parallelism is not supported"; FP16/BF16 in its support matrix; num_eagle_layers
  / max_non_leaves_per_layer are checkpoint-conversion settings, EAGLE-2 a runtime switch of the same engine.
"""

# trtllm: EAGLE's rules on TensorRT-LLM 1.2's engine flow (method.EngineFlow hooks)

from __future__ import annotations

from typing import Any

from builder.speculative.eagle.config import EagleConfig
from builder.speculative.method import TRTLLM_ENGINE_LINE, Checks, Facts

EAGLE_MAX_BATCH = 512  # tensorrt_llm/builder.py asserts
EAGLE_MAX_DRAFT = 256
BUILDER = "tensorrt_llm/builder.py"


def check(c: EagleConfig, checks: Checks) -> None:
    r = checks.recipe
    if c.draft_vocab is not None:
        checks.add(
            ("speculative", "draft_vocab"),
            f"{TRTLLM_ENGINE_LINE}'s engine-path EAGLE drafts through the target's whole "
            "LM head (no draft-to-target token map; EAGLE-3's d2t belongs to the PyTorch flow): a reduced draft "
            "vocabulary is trtspec's own engines only",
            allowed="null (the whole vocabulary)",
        )
    if c.tree.type == "dynamic":
        checks.add(
            ("speculative", "tree", "type"),
            f"{TRTLLM_ENGINE_LINE}'s Triton inflight_batcher_llm backend builds EAGLE "
            "from eagle_choices only (model_instance_state.cc: EagleConfig(eagleChoices), useDynamicTree "
            "false): EAGLE-2 dynamic trees are not served through Triton",
            allowed="static (speculative.version: 1)",
        )
    b = r.build
    if b.max_batch_size > EAGLE_MAX_BATCH:
        checks.add(
            ("build", "max_batch_size"),
            f"max_batch_size={b.max_batch_size}: {TRTLLM_ENGINE_LINE} builds EAGLE for at "
            f"most {EAGLE_MAX_BATCH} sequences (tensorrt_llm/builder.py)",
            allowed=f"1..{EAGLE_MAX_BATCH}",
        )
    if r.quantization.mode == "fp8":
        checks.add(
            ("quantization", "mode"),
            f"FP8 is not in {TRTLLM_ENGINE_LINE}'s EAGLE support matrix (examples/eagle/"
            "README.md lists FP16/BF16); no code check refuses it — verify on a GPU host "
            "(scripts/gpu_check.sh)",
            warn=True,
        )


def check_tree(c: EagleConfig, f: Facts, checks: Checks) -> None:
    """A static tree's draft within what the builder takes (`f`: the resolved tree's facts)."""
    if c.tree.type != "static":
        return
    size = checks.recipe.build.max_draft_len or f.nodes
    if size > EAGLE_MAX_DRAFT:
        checks.add(
            ("speculative", "tree", "choices"),
            f"{size} draft tokens: {TRTLLM_ENGINE_LINE} builds EAGLE for at most {EAGLE_MAX_DRAFT} "
            "(tensorrt_llm/builder.py)",
            allowed=f"trees of 1..{EAGLE_MAX_DRAFT} nodes",
        )


def refuse_build(_c: EagleConfig, recipe: Any, draft_len: int, _tree_nodes: int) -> None:
    """What trtllm-build refuses or changes silently for EAGLE (UserError)."""
    from builder.errors import UserError

    b = recipe.build
    if recipe.parallelism.pp > 1:
        raise UserError(
            "EAGLE does not support pipeline parallelism in TensorRT-LLM (examples/eagle/README.md, Limitations)",
            field="parallelism.pp",
            allowed="1",
        )
    if not recipe.trtllm.use_paged_context_fmha:
        raise UserError(
            f"EAGLE needs paged context FMHA; {BUILDER} would turn it on silently",
            field="trtllm.use_paged_context_fmha",
            allowed="true",
        )
    if b.max_batch_size > EAGLE_MAX_BATCH:
        raise UserError(
            f"max_batch_size={b.max_batch_size}: {BUILDER} asserts <= {EAGLE_MAX_BATCH} for EAGLE",
            field="build.max_batch_size",
            allowed=f"1..{EAGLE_MAX_BATCH}",
        )
    if draft_len > EAGLE_MAX_DRAFT:
        where = "build.max_draft_len" if b.max_draft_len is not None else "speculative.tree"
        raise UserError(
            f"max_draft_len={draft_len}: {BUILDER} asserts <= {EAGLE_MAX_DRAFT} for EAGLE",
            field=where,
            allowed=f"at most {EAGLE_MAX_DRAFT} draft nodes",
        )


def draft_len_source(c: EagleConfig) -> str | None:
    if c.tree.type == "dynamic":
        return "derived: speculative.tree.total_nodes (EAGLE-2 keeps at most that many draft nodes)"
    return None


def notes(c: EagleConfig) -> list[dict[str, str]]:
    return [
        {
            "setting": "speculative.tree",
            "value": c.tree.type,
            "where": "num_eagle_layers / max_non_leaves_per_layer live in the checkpoint; EAGLE-2's dynamic "
            "tree is a runtime switch of the same engine (examples/eagle/README.md)",
        }
    ]
