"""Ranks of a TensorRT-LLM checkpoint: which tensor-parallel slice and which layers each rank file holds.

Upstream facts (TensorRT-LLM 1.2.0rc2, commit b35ac1b64368513d215c57d2ed01d62d910df8da):
* `tensorrt_llm/mapping.py` (`MpiTopology`): tp_rank = rank % tp_size, pp_rank = rank // (tp_size · cp_size)
  (cp_size is 1 here), so ranks are numbered tp-fastest: rank = pp_rank · tp + tp_rank.
* `MappingBase.pp_layers`: `torch.tensor_split(torch.arange(num_layers), pp_size)[pp_rank]`: when
  num_layers % pp = n != 0, the first n ranks get one layer more; `assert pp_size <= num_layers`.
* `MappingBase.to_dict` (minus `rank`, which `PretrainedConfig.to_dict` pops) is the config's `mapping`.
* `tensorrt_llm/_utils.py` `pad_vocab_size`: ceil(vocab / tp) · tp — the LM head's rows are padded to it
  (`LLaMAForCausalLM.__init__` builds a ColumnLinear of that width; the unified loader's `fill` pads with zeros).

No torch here: the planner and the tests import this without the model stack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Mapping:
    """One rank of a tp × pp world."""

    tp: int
    pp: int
    rank: int = 0

    def __post_init__(self) -> None:
        if self.tp < 1 or self.pp < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"bad mapping tp={self.tp} pp={self.pp} rank={self.rank}")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @property
    def pp_rank(self) -> int:
        return self.rank // self.tp

    @property
    def is_first_pp_rank(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_pp_rank(self) -> bool:
        return self.pp_rank == self.pp - 1

    def pp_layers(self, num_layers: int) -> list[int]:
        """Global indices of the decoder layers this rank runs (torch.tensor_split semantics)."""
        return pp_layer_ranges(num_layers, self.pp)[self.pp_rank]

    def ranks(self) -> list[Mapping]:
        """Every rank of this world, in rank order."""
        return [Mapping(self.tp, self.pp, r) for r in range(self.world_size)]


def pp_layer_ranges(num_layers: int, pp: int) -> list[list[int]]:
    """Layers of each pipeline rank: the first num_layers % pp ranks hold one layer more."""
    if pp > num_layers:
        raise ValueError(f"pp={pp} exceeds num_layers={num_layers}")
    base, extra = divmod(num_layers, pp)
    out, start = [], 0
    for r in range(pp):
        n = base + (1 if r < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


def pad_vocab_size(vocab_size: int, tp: int) -> int:
    """The vocabulary rounded up to a multiple of tp (upstream `_utils.pad_vocab_size`)."""
    return int(math.ceil(vocab_size / tp) * tp)


def mapping_config(tp: int, pp: int) -> dict[str, Any]:
    """The `mapping` object of config.json: `MappingBase.to_dict()` of 1.2.0rc2 without `rank`.

    Defaults as `MappingBase.__init__` derives them for a dense model without context parallelism:
    moe_tp_size = tp (no expert parallelism), attn_tp_size = tp · cp_size, attn_cp_size = 1.
    """
    return {
        "world_size": tp * pp,
        "gpus_per_node": 8,
        "cp_size": 1,
        "tp_size": tp,
        "pp_size": pp,
        "moe_tp_size": tp,
        "moe_cluster_size": 1,
        "moe_ep_size": 1,
        "attn_tp_size": tp,
        "attn_cp_size": 1,
        "cp_config": {},
        "enable_attention_dp": False,
        "enable_lm_head_tp_in_adp": False,
    }
