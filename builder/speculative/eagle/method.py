"""EAGLE-1/2 as a method: a one-layer draft network over [token embedding; target hidden], exported as its own
graph (`config`, `draft_model`, `drafter`); its TensorRT-LLM 1.2 rules are in `trtllm`."""

# trtllm: the method's TensorRT-LLM mapping (method.Trtllm), its rules in eagle/trtllm.py

from __future__ import annotations

from builder.model.pickled import EAGLE
from builder.speculative.eagle import trtllm
from builder.speculative.eagle.config import EagleConfig
from builder.speculative.method import (
    DRAFT_GRAPH,
    Checks,
    DraftCheckpoint,
    EngineFlow,
    Facts,
    Method,
    NotServed,
    Trtllm,
)


def facts(c: EagleConfig) -> Facts:
    # a draft vocabulary (`draft_vocab`) and quantized draft weights (`draft_weights`) are part of the graphs, named
    # for the reader
    about = ([f"V={c.draft_vocab}"] if c.draft_vocab else []) + ([c.draft_weights] if c.draft_weights else [])
    return tree_facts(c.tree, f"eagle-{c.version}" + (f"({','.join(about)})" if about else ""))


def tree_facts(t, label: str) -> Facts:
    """The facts of an EAGLE tree section (static choices, resolved inline, or a dynamic setting); EAGLE-3's too."""
    if t.type == "dynamic":
        return Facts(nodes=t.total_nodes, levels=t.depth, label=label, top_k=t.top_k, tentative=t.depth * t.top_k)
    choices = t.choices  # resolved: inline
    return Facts(
        nodes=len(choices),
        levels=max((len(ch) for ch in choices), default=0),
        label=label,
        top_k=1 + max((ch[-1] for ch in choices if ch), default=0),
        tentative=len(choices) + 1,
    )


def tree_path(c: EagleConfig) -> tuple[str, ...] | None:
    return ("tree", "choices") if c.tree.type == "static" else None


def check(c: EagleConfig, checks: Checks) -> None:
    """EAGLE-1 takes a static tree, EAGLE-2 a dynamic one no larger than its levels can produce."""
    want = "static" if c.version == 1 else "dynamic"
    if c.tree.type != want:
        checks.add(("speculative", "tree", "type"), f"EAGLE-{c.version} uses a {want} tree", allowed=want)
    check_tree_size(c.tree, checks)


def check_tree_size(t, checks: Checks) -> None:
    """A dynamic tree keeps no more nodes than its levels can produce (EAGLE-2's and EAGLE-3's)."""
    if t.type != "dynamic":
        return
    most = t.top_k + (t.depth - 1) * t.top_k * t.top_k
    if t.total_nodes > most:
        checks.add(
            ("speculative", "tree", "total_nodes"),
            f"total_nodes={t.total_nodes} exceeds the {most} candidates depth={t.depth}, top_k={t.top_k} can produce",
            allowed=f"1..{most}",
        )


def check_draft(c: EagleConfig, f: Facts, checks: Checks) -> None:
    """The draft vocabulary: no larger than the target's, no smaller than the top-k a tree level takes."""
    if c.draft_vocab is None:
        return
    arch = checks.recipe.model.architecture
    vocab = None if arch is None else arch.vocab_size
    top_k = f.top_k
    if vocab is not None and c.draft_vocab > vocab:
        checks.add(
            ("speculative", "draft_vocab"),
            f"draft_vocab={c.draft_vocab} exceeds the target's vocab_size={vocab}",
            allowed=f"{top_k}..{vocab}, or null (the whole vocabulary)",
        )
    elif c.draft_vocab < top_k:
        checks.add(
            ("speculative", "draft_vocab"),
            f"draft_vocab={c.draft_vocab} is smaller than the {top_k} candidates a tree level takes (the tree's top-k)",
            allowed=f">= {top_k}, or null (the whole vocabulary)",
        )


def make_drafter(c: EagleConfig, net):
    if net is None:
        raise ValueError("EAGLE needs its draft network")
    return tree_drafter(c.tree, net)


def tree_drafter(t, net):
    """A drafter factory growing the section's tree (static choices, resolved; or a dynamic setting) over `net`."""
    from builder.speculative.eagle.drafter import DynamicSpec, EagleDrafter
    from builder.speculative.eagle.tree import static_tree

    shape = DynamicSpec(t.depth, t.top_k, t.total_nodes) if t.type == "dynamic" else static_tree(t.choices)
    return lambda: EagleDrafter(net, shape)


METHOD = Method(
    name="eagle",
    config=EagleConfig,
    summary="EAGLE-1/2: a one-layer draft model over [token embedding; target hidden]",
    facts=facts,
    make_drafter=make_drafter,
    tree_path=tree_path,
    check=check,
    check_draft=check_draft,
    draft=DraftCheckpoint(
        what="EAGLE draft",
        module="eagle_draft",
        layout=EAGLE,
        loader="builder.speculative.eagle.draft_model:load_for_recipe",
        checker="builder.speculative.eagle.draft_model:check_folder",
    ),
    exports=DRAFT_GRAPH,
    export_draft="builder.export.eagle:export_eagle",
    torch_net="builder.engines.torch_eagle:TorchEagleNet",
    tune="builder.tune.static:EAGLE",
    memory="builder.plan.eagle:MEMORY",
    trtllm=Trtllm(
        engine=EngineFlow(
            build_mode="eagle",
            decoding_mode="eagle",
            architecture="EagleForCausalLM",
            repo_parameter="eagle_choices",
            repo_value=lambda c: tuple(tuple(ch) for ch in c.tree.choices) if c.tree.type == "static" else (),
            checkpoint="builder.trtllm.checkpoint.eagle:DRAFT",
            check=trtllm.check,
            check_tree=trtllm.check_tree,
            refuse_build=trtllm.refuse_build,
            draft_len_source=trtllm.draft_len_source,
            notes=trtllm.notes,
        ),
        pytorch=NotServed(
            "TensorRT-LLM's PyTorch backend drafts with EAGLE-3 only: EAGLE-1/2 draft checkpoints are incompatible "
            "with its Eagle3 path (its docs; NVIDIA/TensorRT-LLM issue #10396)"
        ),
    ),
)
