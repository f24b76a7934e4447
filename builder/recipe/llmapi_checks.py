"""Cross-field rules for `target.backend: trtllm-llmapi` (TensorRT-LLM's PyTorch / LLM-API flow), each naming the
upstream limit it enforces; called from `trtllm_checks.check_trtllm`.

What is checked here is what TensorRT-LLM's PyTorch backend refuses, or what it would silently serve differently
from the recipe; the release facts are `builder.recipe.trtllm.LLMAPI_RELEASES`. Sources
(NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` @ 470bb72055d5 unless said otherwise):

- a method's `Method.trtllm.pytorch` is `NotServed` with upstream's reason (Medusa, Lookahead:
  `supports_backend` refuses "pytorch"; EAGLE-1/2: the PyTorch backend drafts with EAGLE-3 only);
- EAGLE-3 one-model drafts a chain in 1.2 (`tensorrt_llm/_torch/speculative/eagle3.py` @ 001e67005b4f); later
  lines take EAGLE-2's dynamic tree with `max_draft_len <= max_total_draft_tokens <= dynamic_tree_max_topK *
  max_draft_len` (`EagleDecodingConfig.validate_eagle_config`); static trees (`eagle_choices`) are deprecated and
  "will be removed in release 1.4" (the same validator), so only chains and dynamic trees are written;
- NGram drafts one chain (`NGramDecodingConfig.validate_ngram_config`: "Current NGram only supports linear tree"),
  of `max_draft_len` tokens looked up with suffixes up to `max_matching_ngram_size`, with no adaptive length.
"""

# trtllm: the rules of target.backend trtllm-llmapi (the recipe layer cannot import the backend's modules)

from __future__ import annotations

from builder.errors import UserError
from builder.recipe.findings import Findings
from builder.recipe.resolve import tree_choices_spec, tree_field
from builder.recipe.trtllm import LLMAPI_RELEASES
from builder.speculative import registry
from builder.speculative.choices import load_choices
from builder.speculative.method import NotServed

LINE = "TensorRT-LLM's PyTorch flow"


def pytorch_served() -> tuple[str, ...]:
    """The methods the PyTorch flow serves, in registry order (the `allowed` of a refusal)."""
    return tuple(n for n, m in registry.methods().items() if not isinstance(m.trtllm.pytorch, NotServed))


def is_chain(choices: list[list[int]]) -> bool:
    """True when the static tree's choices are one chain [[0], [0, 0], …] (in any order)."""
    depth = len(choices)
    return depth > 0 and sorted(choices, key=len) == [[0] * i for i in range(1, depth + 1)]


def check_llmapi(c: Findings) -> None:
    r = c.recipe
    if r.target.device == "cpu":
        return  # `checks.target` already says this backend needs a GPU target
    version = r.trtllm.version
    if version not in LLMAPI_RELEASES:
        c.add(
            ("trtllm", "version"),
            f"TensorRT-LLM {version} is not in trtspec's table of PyTorch-flow releases",
            allowed=", ".join(LLMAPI_RELEASES),
        )
        return
    if r.triton.draft_schedule:
        c.add(
            ("triton", "draft_schedule"),
            f"{LINE} decides the draft per step (its own draft_len_schedule); draft_schedule drives trtspec's own "
            "spec_decoder only",
            allowed="[] (empty)",
        )
    rel = LLMAPI_RELEASES[version]
    if not rel.triton and r.trtllm.container is None:
        c.add(
            ("trtllm", "container"),
            f"NVIDIA publishes no Triton TRT-LLM container of {version} ({rel.status}): the bundle serves with "
            f"trtllm-serve in {rel.image}; its Triton launch needs an image with tritonserver and this release",
            warn=True,
        )
    flow = registry.of(r.speculative).trtllm.pytorch
    if isinstance(flow, NotServed):
        c.add(("speculative", "method"), flow.reason, allowed=", ".join(pytorch_served()))
        return
    if flow.decoding_type == "Eagle3":
        _eagle3(c, rel)
    elif flow.decoding_type == "NGram":
        _ngram(c)


def _eagle3(c: Findings, rel) -> None:
    spec = c.recipe.speculative
    t = spec.tree
    if t.type == "static":
        field = tree_field(c.recipe)
        try:
            choices = [list(ch) for ch in load_choices(tree_choices_spec(c.recipe), c.loaded.dir_of(field))]
        except (UserError, UnicodeDecodeError, RecursionError):
            return  # the shared tree rules (spec_checks) report unreadable trees
        if not is_chain(choices):
            allowed = "a chain [[0], [0, 0], …]" + (" or tree.type: dynamic" if rel.eagle3_tree == "dynamic" else "")
            c.add(
                field,
                f"{LINE} drafts EAGLE-3 as a chain{' or a dynamic tree' if rel.eagle3_tree == 'dynamic' else ''}: "
                "static trees (eagle_choices) are deprecated and removed in 1.4 (llm_args.py "
                "EagleDecodingConfig)",
                allowed=allowed,
            )
    elif rel.eagle3_tree == "chain":
        c.add(
            ("speculative", "tree"),
            f"TensorRT-LLM {rel.version}'s PyTorch flow drafts EAGLE-3 as a chain only ('currently Eagle3 only "
            f"supports linear tree', _torch/speculative/eagle3.py): a dynamic tree of depth {t.depth} is its chain "
            f"[[0], …, [0]*{t.depth}]; dynamic trees need a later line",
            allowed=f"tree: {{type: static, choices: <a chain>}}, or trtllm.version: "
            f"{', '.join(v for v, x in LLMAPI_RELEASES.items() if x.eagle3_tree == 'dynamic')}",
        )
    else:
        low, high = t.depth, t.top_k * t.depth
        if not low <= t.total_nodes <= high:
            c.add(
                ("speculative", "tree", "total_nodes"),
                f"total_nodes={t.total_nodes} is max_total_draft_tokens, which {LINE} bounds by max_draft_len "
                f"(depth={t.depth}) and dynamic_tree_max_topK × max_draft_len ({t.top_k} × {t.depth})",
                allowed=f"{low}..{high}",
            )
    if spec.verification == "rejection" and not rel.rejection:
        c.add(
            ("speculative", "verification"),
            f"TensorRT-LLM {rel.version}'s one-model EAGLE-3 accepts drafts by equality with the target's greedy "
            "token (eagle3.py sample_and_accept_draft_tokens); tree rejection sampling of sampled requests is a "
            "later line's (allow_advanced_sampling) or trtspec's own engines'",
            allowed="greedy",
        )


def _ngram(c: Findings) -> None:
    spec = c.recipe.speculative
    if spec.candidates != 1:
        c.add(
            ("speculative", "candidates"),
            f"{LINE}'s NGram drafts one chain ('Current NGram only supports linear tree', llm_args.py)",
            allowed="1",
        )
    if spec.adaptive:
        c.add(
            ("speculative", "adaptive"),
            f"{LINE}'s NGram drafts max_draft_len tokens whenever a suffix matches: no adaptive length (the tokens "
            "are the same, the speed is not what trtspec's tuner measured)",
            warn=True,
        )
    if spec.min_match != 1:
        c.add(
            ("speculative", "min_match"),
            f"{LINE}'s NGram has no shortest-suffix setting: it looks suffixes up from max_matching_ngram_size "
            f"(= max_match) down; min_match={spec.min_match} is not written",
            warn=True,
        )
