"""The EAGLE-1/2 draft in the TensorRT-LLM checkpoint (`EagleForCausalLM`): EAGLE's `EngineFlow.checkpoint`.

Sources (TensorRT-LLM):
* `tensorrt_llm/models/eagle/model.py` (`EagleForCausalLM`, `EagleNet`) + `examples/eagle/convert_checkpoint.py`:
  `num_eagle_layers` copies `eagle_nets.{i}` of the draft (last pp rank; upstream refuses pp > 1: "Pipeline
  parallelism is not supported in EAGLE yet."), each a `drafter` = LLaMAModel with fc_after_embed (`drafter.fc`,
  Linear(2C → C, bias), input [embed; hidden]), no input_layernorm in its first layer, no ln_f, and `lm_head` = a
  copy of the base LM head. The drafter's `vocab_embedding` is written from the target's embedding: upstream
  reads the EAGLE checkpoint's frozen copy (`embed_tokens.weight`), which `index` checks equals the target's up
  to half-precision rounding, as `builder.speculative.eagle.draft_model.load_eagle` does before using the
  target's exact table. The drafter's attention is never FP8; with an FP8 KV cache its KV scales are 1.0.
* `tensorrt_llm/models/eagle/config.py` @ 2a9abd9536aa62ad3e4b9314be9286b1b1be523b: `EagleConfig.to_dict` = the
  Llama dict + num_eagle_layers, max_non_leaves_per_layer, max_draft_len, eagle_net_config (the draft's Llama
  dict); `examples/eagle/convert_checkpoint.py` @ 65b31db1b401d3752b8ebe7c29093cbfb6af04b7 (its
  examples/constraints.txt pins tensorrt_llm 1.3.0rc5) also writes head_dim and head_size in both. That script,
  like `EagleForCausalLM.from_hugging_face` in `eagle/model.py` @ 89fd9b74ab7ae753b4c6b3db25a400dca7ea54a0 (the
  1.2-era source), builds `EagleForCausalLM(tllm_config)` before `save_checkpoint`, and
  `EagleForCausalLM.__init__` sets, on the same `eagle_net_config` object the saved config.json serialises:
  mapping = Mapping(world_size, tp_size=world_size, pp_size=1), fc_after_embed = True,
  use_input_layernorm_in_first_layer = False, use_last_layernorm = False, layer_idx_offset = the target's
  num_hidden_layers — so upstream's config.json carries those EAGLE values, and so does ours (`config`).
  (The 0.15-dev converter @ 04a2cacbfd3b9ac76191bd8498ad871607b63a04 dumped its dict as is, without them; the
  1.2 release tag's copy of the script was not among the sources read.)
* The EagleNets' LM heads are copies of the target's, in the model dtype: an FP8 target LM head cannot be shared
  with them (`check_quant`); '*eagle_nets*' joins exclude_modules (the quantize stage's rule: drafts stay in the
  model dtype).

The draft is read in SafeAILab's layout (`builder.speculative.eagle.draft_model`: config.json, `model.safetensors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder.errors import UserError
from builder.model.config import LlamaConfig
from builder.speculative.choices import Choice
from builder.trtllm.checkpoint.config import llama_config
from builder.trtllm.checkpoint.drafts import Draft, Inputs
from builder.trtllm.checkpoint.mapping import Mapping, mapping_config
from builder.trtllm.checkpoint.names import Heads, Part, Quant, embedding_part, layer_parts, lm_head_parts
from builder.trtllm.checkpoint.prepare import check_split
from builder.trtllm.checkpoint.sources import check_shapes, read_json

if TYPE_CHECKING:
    from builder.speculative.eagle.config import EagleConfig
    from builder.trtllm.checkpoint import CheckpointRequest

SOURCE = "eagle"


@dataclass(frozen=True)
class Net:
    """The draft's Llama stack, as its config.json describes it."""

    cfg: LlamaConfig
    fc_bias: bool  # config.json "bias" (absent: true); without one the fc bias is written as zeros


def eagle_tree_numbers(choices: list[Choice]) -> tuple[int, int]:
    """(num_eagle_layers, max_non_leaves_per_layer) of a static EAGLE tree: its depth, and the most nodes
    of one level that have children (the root counts at level 0), as TensorRT-LLM's EagleModule takes them
    (speculativeChoicesUtils.cpp checkNumNonLeafNodesPerLayer)."""
    depth = max(len(c) for c in choices)
    parents = {tuple(c[:-1]) for c in choices}
    per_level = [sum(1 for p in parents if len(p) == d) for d in range(depth)]
    return depth, max(per_level)


def request(c: EagleConfig) -> dict[str, Any]:
    """The tree's numbers (`CheckpointRequest`'s docstring); EAGLE-2's dynamic tree is a runtime setting."""
    t = c.tree
    extra: dict[str, Any] = {"eagle_version": c.version}
    if t.type == "static":
        layers, non_leaves = eagle_tree_numbers(t.choices)  # resolved: inline
    else:
        layers, non_leaves = t.depth, t.top_k
        extra["eagle_dynamic_top_k"] = t.top_k
    return {**extra, "num_eagle_layers": layers, "max_non_leaves_per_layer": non_leaves}


def check(req: CheckpointRequest) -> None:
    if req.pp != 1:
        raise UserError(
            "TensorRT-LLM's EAGLE checkpoint does not support pipeline parallelism",
            field="parallelism.pp",
            allowed="1",
        )
    if req.num_eagle_layers < 1 or req.max_non_leaves_per_layer < 1:
        raise UserError(
            "EAGLE needs num_eagle_layers >= 1 (the tree depth) and max_non_leaves_per_layer >= 1",
            field="num_eagle_layers",
        )


def index(req: CheckpointRequest, inputs: Inputs) -> Net:
    """The draft's config.json and weights against the target (its width, vocabulary, embedding, the tp split)."""
    import torch

    from builder.speculative.eagle import draft_model

    folder = Path(req.draft_dir)  # type: ignore[arg-type]
    raw = read_json(folder / "config.json", "EAGLE", "draft_dir")
    draft = LlamaConfig.from_hf_dict(raw, str(folder / "config.json"))
    bias = raw.get("bias", True)
    if not isinstance(bias, bool):
        raise UserError(f"expected true or false, got {bias!r}", location=str(folder / "config.json"), field="bias")
    cfg = inputs.cfg
    if (draft.hidden_size, draft.vocab_size) != (cfg.hidden_size, cfg.vocab_size):
        raise UserError(
            f"the draft's (hidden_size, vocab_size) {(draft.hidden_size, draft.vocab_size)} differ from "
            f"the target's {(cfg.hidden_size, cfg.vocab_size)}",
            location=str(folder / "config.json"),
        )
    check_split(draft, req.tp, 1, "EAGLE draft")
    file = folder / draft_model.WEIGHTS
    if not file.is_file():
        raise UserError(
            f"no {draft_model.WEIGHTS} (pickled checkpoints are not read)", location=str(folder), field="draft_dir"
        )
    inputs.files.add_file(file, SOURCE)
    check_shapes(
        inputs.files,
        SOURCE,
        draft_model.expected_shapes(draft, bias),
        str(file),
        optional=frozenset({"embed_tokens.weight"}),
    )
    if f"{SOURCE}:embed_tokens.weight" in inputs.files.tensors:  # as load_eagle: it must be the target's embedding
        stored = inputs.files.read(f"{SOURCE}:embed_tokens.weight").float()
        target = inputs.files.read("base:model.embed_tokens.weight").float()
        if not torch.allclose(stored, target, rtol=1e-2, atol=1e-3):
            raise UserError(
                "embed_tokens.weight differs from the target's embedding: the draft was trained for "
                "another target model",
                location=str(file),
                field="embed_tokens.weight",
            )
    inputs.stacks[SOURCE] = draft  # its q/k/v keys split by the draft's heads
    return Net(draft, bias)


def check_quant(quant: Quant) -> None:
    if "lm_head" in quant.fp8_modules:
        raise UserError(
            "an FP8 LM head cannot be shared with the EAGLE drafter's LM heads; keep lm_head in exclude_modules",
            field="quantization.exclude_modules",
            allowed="a list containing 'lm_head'",
        )


def config(base: dict[str, Any], req: CheckpointRequest, inputs: Inputs) -> dict[str, Any]:
    """EagleConfig.to_dict() as upstream's converter saves it (module docstring: the EagleNet values)."""
    net: Net = inputs.indexed
    draft = llama_config(
        net.cfg, "LlamaForCausalLM", req.dtype, req.tp, req.pp, base["quantization"], req.use_parallel_embedding
    )
    world = base["mapping"]["world_size"]
    draft = {
        **draft,
        "head_dim": draft["head_size"],
        "mapping": mapping_config(world, 1),
        "fc_after_embed": True,
        "use_input_layernorm_in_first_layer": False,
        "use_last_layernorm": False,
        "layer_idx_offset": base["num_hidden_layers"],
    }
    return {
        **base,
        "head_dim": base["head_size"],
        "num_eagle_layers": req.num_eagle_layers,
        "max_non_leaves_per_layer": req.max_non_leaves_per_layer,
        "max_draft_len": req.max_draft_len,
        "eagle_net_config": draft,
    }


def parts(req: CheckpointRequest, inputs: Inputs, m: Mapping, dtype: str) -> list[Part]:
    """`num_eagle_layers` identical EagleNets (last pp rank only): the draft layer(s), fc, the target's embedding and
    LM head."""
    if not m.is_last_pp_rank:
        return []
    net: Net = inputs.indexed
    base = inputs.cfg
    h, V = Heads.of(net.cfg), base.vocab_size
    quant = Quant(kv_cache=inputs.quant.kv_cache)
    head = "base:model.embed_tokens.weight" if base.tie_word_embeddings else "base:lm_head.weight"
    out: list[Part] = []
    for i in range(req.num_eagle_layers):
        prefix = f"eagle_nets.{i}."
        out.append(
            embedding_part(
                prefix + "drafter.vocab_embedding.weight",
                "base:model.embed_tokens.weight",
                V,
                h.C,
                m,
                dtype,
                req.use_parallel_embedding,
            )
        )
        for j in range(net.cfg.num_hidden_layers):
            out += layer_parts(
                h, m, dtype, f"{SOURCE}:layers.{j}.", f"{prefix}drafter.layers.{j}.", quant, None, input_norm=j > 0
            )
        out.append(Part(prefix + "drafter.fc.weight", (h.C // m.tp, 2 * h.C), dtype, "rows", (f"{SOURCE}:fc.weight",)))
        out.append(
            Part(
                prefix + "drafter.fc.bias",
                (h.C // m.tp,),
                dtype,
                "rows" if net.fc_bias else "zeros",
                (f"{SOURCE}:fc.bias",) if net.fc_bias else (),
            )
        )
        out += lm_head_parts(prefix + "lm_head", head, V, h.C, m, dtype, False)
    return out


DRAFT = Draft(
    source=SOURCE,
    exclude="*eagle_nets*",
    request=request,
    check=check,
    index=index,
    config=config,
    parts=parts,
    check_quant=check_quant,
)
