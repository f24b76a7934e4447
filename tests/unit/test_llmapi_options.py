"""The LLM-API options trtspec writes for TensorRT-LLM's PyTorch flow, against upstream's option names as data.

Oracles: the committed table of `tensorrt_llm/llmapi/llm_args.py` @ 470bb720 (`builder.trtllm.llmapi.llm_args_table`:
every class is a StrictBaseModel, so a key that is not a field is an error upstream), the other versions of that file
read (`READINGS`: the 1.2.0rc2-era one and a later main one bracket the release/1.2 branch, fcd3f316 is the 0.21
line), the 1.4.0rc1 API reference's Eagle3DecodingConfig signature, upstream's own bound on dynamic trees
re-implemented here from `EagleDecodingConfig.validate_eagle_config`, and devtools/llm_args_table.py run over
snippets written here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from builder.recipe.loader import load_recipe
from builder.recipe.trtllm import LLMAPI_RELEASES
from builder.trtllm.llmapi.llm_args_table import (
    OWN,
    READINGS,
    RELEASE_READINGS,
    SIGNATURES,
    fields,
    refusals,
    speculative_class,
)
from builder.trtllm.llmapi.options import key_paths, llm_options

REPO = Path(__file__).resolve().parents[2]
R8 = REPO / "recipes" / "llama3-8b-1xh100-fp8-llmapi-eagle3.yaml"
DYNAMIC = ("trtllm.version=1.4.0rc1", "speculative.tree={type: dynamic, depth: 6, top_k: 10, total_nodes: 60}")
CASES = {
    "eagle3-chain-1.2.1": (R8, ()),
    "eagle3-70b-tp4": (REPO / "recipes" / "llama3-70b-tp4-h100-fp8-llmapi-eagle3.yaml", ()),
    "eagle3-dynamic-1.4.0rc1": (R8, DYNAMIC),
    "eagle3-dynamic-rejection": (R8, (*DYNAMIC, "speculative.verification=rejection")),
    "ngram": (REPO / "recipes" / "llama3-8b-1xh100-fp8-llmapi-ngram.yaml", ()),
    "none": (REPO / "recipes" / "llama3-8b-1xh100-fp8-llmapi-none.yaml", ()),
}


def options_of(name: str) -> tuple[object, dict]:
    path, sets = CASES[name]
    r = load_recipe(path, list(sets)).recipe
    return r, llm_options(r, "/trtspec/checkpoint/draft", (1, 15, 28))


def upstream_dynamic_bound(max_draft_len: int, top_k: int, total: int | None) -> int:
    """`EagleDecodingConfig.validate_eagle_config` (llm_args.py @ 470bb720), dynamic branch: the
    max_total_draft_tokens it keeps, or ValueError where it refuses."""
    if top_k is None or top_k <= 0:
        raise ValueError("dynamic_tree_max_topK should be provided")
    if total is None:
        return top_k * max_draft_len
    if total < max_draft_len or total > top_k * max_draft_len:
        raise ValueError("max_total_draft_tokens out of range")
    return total


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_key_written_is_a_field_of_the_pinned_llm_args(name):
    r, opts = options_of(name)
    for cls, key in key_paths(opts):
        assert key in fields(cls), f"{name}: {key} is not a field of {cls} ({opts})"
    spec = opts.get("speculative_config")
    sig = SIGNATURES.get(r.trtllm.version, {})
    if spec is not None and speculative_class(spec["decoding_type"]) in sig:  # the release's own documented names
        assert set(spec) <= sig[speculative_class(spec["decoding_type"])], spec


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_key_written_is_taken_by_each_version_bounding_the_release(name):
    r, opts = options_of(name)
    for reading in RELEASE_READINGS[r.trtllm.version]:
        assert refusals(opts, READINGS[reading]) == [], f"{name} on {r.trtllm.version}: {reading}"


def test_every_llmapi_release_is_bounded_by_versions_read():
    assert set(RELEASE_READINGS) == set(LLMAPI_RELEASES)
    assert all(name in READINGS for names in RELEASE_READINGS.values() for name in names)
    # 1.2.1 sits between a version before the release/1.2 branch (read whole) and main versions after it
    assert READINGS["1090804222"].whole and "1090804222" in RELEASE_READINGS["1.2.1"]


def test_the_1_2_1_names_are_the_only_ones_both_sides_of_the_branch_take():
    _, opts = options_of("eagle3-chain-1.2.1")
    before, after = READINGS["1090804222"], READINGS["470bb720"]

    def with_spec(**change):
        spec = dict(opts["speculative_config"])
        for old, new in change.items():
            spec[new[0]] = spec.pop(old) if new[1] is None else new[1]
        return {**opts, "speculative_config": spec}

    eagle3 = with_spec(decoding_type=("decoding_type", "Eagle3"))
    assert refusals(eagle3, before) == ["speculative_config.decoding_type 'Eagle3': refused by 1090804222"]
    assert refusals(eagle3, after) == []
    renamed = with_spec(speculative_model_dir=("speculative_model", None))
    assert refusals(renamed, before) == ["EagleDecodingConfig.speculative_model: refused by 1090804222"]
    assert refusals(renamed, after) == []
    assert refusals(opts, before) == refusals(opts, after) == []


def test_fcd3f316_is_the_0_21_line_and_refuses_or_drops_what_1_2_1_is_written_with():
    # hand-read from llm_args.py @ fcd3f316: no CudaGraphConfig (use_cuda_graph / cuda_graph_* at top level), the KV
    # cache dtype at top level (kv_cache_dtype), the PyTorch draft as pytorch_weights_path, no layers to capture; its
    # speculative and KV-cache classes are plain BaseModels that drop unknown keys, BaseLlmArgs forbids them
    _, opts = options_of("eagle3-chain-1.2.1")
    assert refusals(opts, READINGS["fcd3f316"]) == [
        "KvCacheConfig.dtype: dropped by fcd3f316",
        "TorchLlmArgs.cuda_graph_config: refused by fcd3f316",
        "CudaGraphConfig: no such class in fcd3f316 (for max_batch_size)",
        "CudaGraphConfig: no such class in fcd3f316 (for enable_padding)",
        "EagleDecodingConfig.speculative_model_dir: dropped by fcd3f316",
        "EagleDecodingConfig.eagle3_layers_to_capture: dropped by fcd3f316",
    ]
    ngram = {"speculative_config": options_of("ngram")[1]["speculative_config"]}
    assert refusals(ngram, READINGS["fcd3f316"]) == []  # names there, but its NGram drafted prompt_lookup_num_tokens


def test_the_470bb720_reading_is_the_committed_table():
    assert READINGS["470bb720"].keys == {cls: fields(cls) for cls in OWN}
    assert {"Eagle", "Eagle3", "NGram"} <= set(READINGS["470bb720"].decoding_types)


def test_the_key_check_can_fail():
    paths = key_paths({"max_batch_size": 1, "kv_cache_config": {"free_gpu_mem_fraction": 0.5}})
    assert ("KvCacheConfig", "free_gpu_mem_fraction") in paths  # the engine flow's name, not the LLM API's
    assert "free_gpu_mem_fraction" not in fields("KvCacheConfig")
    assert "medusa_choices" not in fields("Eagle3DecodingConfig")


def test_eagle3_chain_on_the_release():
    r, opts = options_of("eagle3-chain-1.2.1")
    assert opts["speculative_config"] == {
        "decoding_type": "Eagle",  # 1.2.1: read as EAGLE-3 on the PyTorch backend
        "max_draft_len": 3,
        "speculative_model_dir": "/trtspec/checkpoint/draft",
        "eagle3_layers_to_capture": [1, 15, 28],
    }
    assert opts["kv_cache_config"]["dtype"] == "fp8" and opts["dtype"] == "bfloat16"
    assert (opts["tensor_parallel_size"], opts["max_batch_size"]) == (r.parallelism.tp, r.build.max_batch_size)


def test_tp4_recipe_writes_its_parallelism():
    r, opts = options_of("eagle3-70b-tp4")
    assert (opts["tensor_parallel_size"], opts["pipeline_parallel_size"]) == (4, 1)
    assert opts["speculative_config"]["eagle3_layers_to_capture"] == [1, 15, 28]  # as given (resolved upstream)


@pytest.mark.parametrize("name", ["eagle3-dynamic-1.4.0rc1", "eagle3-dynamic-rejection"])
def test_dynamic_tree_maps_to_upstreams_knobs_within_its_bound(name):
    r, opts = options_of(name)
    s = opts["speculative_config"]
    t = r.speculative.tree
    assert s["decoding_type"] == "Eagle3" and "speculative_model" in s and s["use_dynamic_tree"] is True
    assert (s["max_draft_len"], s["dynamic_tree_max_topK"]) == (t.depth, t.top_k)
    assert upstream_dynamic_bound(s["max_draft_len"], s["dynamic_tree_max_topK"], s["max_total_draft_tokens"]) == 60
    assert s.get("allow_advanced_sampling") is (True if name.endswith("rejection") else None)


def test_ngram_and_none():
    r, opts = options_of("ngram")
    assert opts["speculative_config"] == {
        "decoding_type": "NGram",
        "max_draft_len": r.speculative.max_draft,
        "max_matching_ngram_size": r.speculative.max_match,
        "is_public_pool": True,
    }
    assert "speculative_config" not in options_of("none")[1]


def test_table_classes_chain_to_their_bases():
    for cls, (bases, own) in OWN.items():
        assert set(own) <= fields(cls)
        for b in bases:
            assert fields(b) <= fields(cls)
    assert "speculative_model_dir" in fields("Eagle3DecodingConfig")  # the alias, inherited
    assert fields("TorchLlmArgs") >= {"model", "backend", "speculative_config", "cuda_graph_config"}


def _extractor():
    spec = importlib.util.spec_from_file_location("llm_args_table_tool", REPO / "devtools" / "llm_args_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SNIPPET = """
from typing import ClassVar, Literal, Optional
class StrictBaseModel: pass
class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: Optional[int] = Field(default=None)
    speculative_model: Optional[str] = Field(default=None,
        validation_alias=AliasChoices("speculative_model", "speculative_model_dir"))
    _private: bool = PrivateAttr(True)
    hidden: bool = PrivateAttr(default=False)
    kind: ClassVar[str] = "x"
    def method(self) -> int:
        local: int = 3
        return local
class EagleDecodingConfig(DecodingBaseConfig):
    decoding_type: Literal["Eagle"] = "Eagle"
    eagle3_layers_to_capture: Optional[set] = None
class Eagle3DecodingConfig(EagleDecodingConfig):
    decoding_type: Literal["Eagle3"] = "Eagle3"
"""


CLASSVAR_SNIPPET = """
from typing import ClassVar
class StrictBaseModel: pass
class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: int = None
    speculative_model_dir: str = None
    @classmethod
    def from_dict(cls, data: dict):
        config_classes = {"Eagle": EagleDecodingConfig, "DraftTarget": DraftTargetDecodingConfig}
        return config_classes[data.pop("decoding_type")](**data)
class EagleDecodingConfig(DecodingBaseConfig):
    eagle3_layers_to_capture: set = None
    decoding_type: ClassVar[str] = "Eagle"
class DraftTargetDecodingConfig(DecodingBaseConfig):
    decoding_type: ClassVar[str] = "Draft_Target"
"""


def test_the_extractor_reads_the_dispatch_of_both_eras():
    tool = _extractor()
    # ClassVar era: from_dict's dict is the dispatch ("DraftTarget", not the ClassVar's "Draft_Target"); the ClassVar
    # is no field
    assert tool.decoding_types(CLASSVAR_SNIPPET) == {
        "DraftTarget": "DraftTargetDecodingConfig",
        "Eagle": "EagleDecodingConfig",
    }
    e = tool.extract(CLASSVAR_SNIPPET, ("EagleDecodingConfig",))["EagleDecodingConfig"]
    assert sorted(e["fields"]) == ["eagle3_layers_to_capture", "max_draft_len", "speculative_model_dir"]
    # Literal era: the literal of each class
    assert tool.decoding_types(SNIPPET) == {"Eagle": "EagleDecodingConfig", "Eagle3": "Eagle3DecodingConfig"}
    assert "DECODING_TYPES = {'Eagle'" in tool.module_text({}, "s @ t", tool.decoding_types(SNIPPET))


def test_the_extractor_reads_fields_aliases_and_literals():
    table = _extractor().extract(SNIPPET, ("Eagle3DecodingConfig", "DecodingBaseConfig"))
    e3 = table["Eagle3DecodingConfig"]
    assert e3["bases"] == ["EagleDecodingConfig"]
    assert sorted(e3["fields"]) == ["decoding_type", "eagle3_layers_to_capture", "max_draft_len", "speculative_model"]
    assert e3["fields"]["decoding_type"]["literal"] == "Eagle3"
    assert e3["fields"]["speculative_model"]["aliases"] == ["speculative_model_dir"]
    assert sorted(table["DecodingBaseConfig"]["fields"]) == ["max_draft_len", "speculative_model"]
    text = _extractor().module_text(table, "snippet @ test")
    assert "SOURCE = 'snippet @ test'" in text and "speculative_model_dir" in text
