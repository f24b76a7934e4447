"""The TensorRT-LLM `inflight_batcher_llm` repository (triton_repo.trtllm): rendered from protobuf, equal to
upstream's interface, with the C++ backend's parameter syntax and rules as oracles.

Oracles:
- upstream's templates as recorded in triton_repo/trtllm/upstream.py (NVIDIA/TensorRT-LLM
  triton_backend/all_models/inflight_batcher_llm/*/config.pbtxt; tensorrt_llm @ 0c8de69a = 1.2.0rc8, the
  closest indexed version to the 1.2.1 pin; the other commits in upstream.SOURCES). The differences we
  make are listed here, independently of the renderer (EXCEPTIONS);
- the C++ backend's string readers, re-implemented from triton_backend/inflight_batcher_llm/src/utils.cc
  @ 192908136e53 (`csvStrToVecInt`, `csvStrToVecVecInt`, `split`) and model_state.cc @ 5cdd6921
  (`gpu_device_ids` / `participant_ids`: split on ';', then csv), and the keys model_instance_state.cc
  @ 0c8de69a reads with their reader types (KEYS_READ).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tritonclient.grpc", reason="the serve extra (tritonclient[grpc]) renders configs")

import triton_repo.trtllm.upstream as U  # noqa: E402
from builder.errors import UserError  # noqa: E402
from triton_repo.config import parse, pb2  # noqa: E402
from triton_repo.trtllm import SettingsError, TrtllmRepoSettings, render_repository  # noqa: E402
from triton_repo.trtllm.render import MODELS_DIR, all_configs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "tests/fixtures/tiny-llama3/base"
ENGINE = "/workspace/engines/llama3-medusa"

# Our deliberate differences from upstream's templates (see triton_repo/trtllm/render.py's docstring).
EXCEPTIONS = {
    "omitted_parameters": {"tensorrt_llm": {"lora_prefetch_dir"}},  # any string, "" included, = a prefetch dir
    "deduplicated_outputs": {"ensemble": {"kv_cache_alloc_total_blocks"}},  # listed twice upstream
}
# model_instance_state.cc / model_state.cc @ 0c8de69a: key -> reader type (GetParameter<T>)
KEYS_READ = {
    "gpt_model_type": "str",
    "gpt_model_path": "str",
    "encoder_model_path": "str",
    "max_beam_width": "int",
    "max_tokens_in_paged_kv_cache": "int",
    "kv_cache_free_gpu_mem_fraction": "float",
    "cross_kv_cache_fraction": "float",
    "kv_cache_host_memory_bytes": "int",
    "kv_cache_onboard_blocks": "bool",
    "max_attention_window_size": "csv",
    "sink_token_length": "int",
    "enable_kv_cache_reuse": "bool",
    "multi_block_mode": "bool",
    "enable_context_fmha_fp32_acc": "bool",
    "cuda_graph_mode": "bool",
    "cuda_graph_cache_size": "int",
    "num_nodes": "int",
    "lora_cache_max_adapter_size": "int",
    "lora_cache_optimal_adapter_size": "int",
    "lora_cache_gpu_memory_fraction": "float",
    "lora_cache_host_memory_bytes": "int",
    "batch_scheduler_policy": "str",
    "speculative_decoding_fast_logits": "bool",
    "tokenizer_dir": "str",
    "xgrammar_tokenizer_info_path": "str",
    "guided_decoding_backend": "str",
    "iter_stats_max_iterations": "int",
    "request_stats_max_iterations": "int",
    "enable_trt_overlap": "bool",
    "normalize_log_probs": "bool",
    "enable_chunked_context": "bool",
    "decoding_mode": "str",
    "medusa_choices": "choices",
    "eagle_choices": "choices",
    "lookahead_window_size": "int",
    "lookahead_ngram_size": "int",
    "lookahead_verification_set_size": "int",
    "gpu_weights_percent": "float",
    "exclude_input_in_output": "bool",
    "cancellation_check_period_ms": "int",
    "stats_check_period_ms": "int",
    "gpu_device_ids": "groups",
    "participant_ids": "groups",
    "executor_worker_path": "str",
}
NOT_IN_TEMPLATE = {"recv_poll_period_ms"}  # read by the backend (default: busy loop), absent from the template
NO_FALLBACK = {"gpt_model_type", "tokenizer_dir", "xgrammar_tokenizer_info_path", "guided_decoding_backend"}


# -- the C++ readers, as the backend runs them --------------------------------------------------------------


def csv_str_to_vec_int(s: str) -> list[int]:
    """utils.cc csvStrToVecInt: throws on "" and on no number; skips leading whitespace per item."""
    if not s:
        raise ValueError("empty")
    out = []
    for item in s.split(","):
        item = item.lstrip()
        if not item:
            break
        out.append(int(item.strip()))
    if not out:
        raise ValueError("Empty vector")
    return out


def csv_str_to_vec_vec_int(s: str) -> list[list[int]]:
    """utils.cc csvStrToVecVecInt: getline(..., '}') repeatedly, drop a leading '{', csv the rest."""
    if not s:
        raise ValueError("empty")
    out, pos = [], 0
    while True:
        end = s.find("}", pos)
        if end < 0:  # no delimiter: getline hits eof -> break
            break
        sub = s[pos:end]
        if not sub:
            break
        out.append(csv_str_to_vec_int(sub[1:] if sub[0] == "{" else sub))
        pos = end + 1
        while pos < len(s) and s[pos].isspace():
            pos += 1
        comma = s.find(",", pos)
        pos = len(s) if comma < 0 else comma + 1
        while pos < len(s) and s[pos].isspace():
            pos += 1
    if not out:
        raise ValueError("Empty vector of vector")
    return out


def id_groups(s: str) -> list[list[int]]:
    """model_state.cc: utils::split(value, ';') then csvStrToVecInt per group ("" -> no groups)."""
    return [csv_str_to_vec_int(g) for g in s.split(";")] if s else []


def reads_as_default(kind: str, value: str) -> bool:
    """True when the backend's reader throws on `value` (caught: the backend keeps its default)."""
    try:
        {"int": int, "float": float, "csv": csv_str_to_vec_int, "choices": csv_str_to_vec_vec_int}[kind](value)
    except ValueError:
        return True
    return False


# -- helpers ------------------------------------------------------------------------------------------------


def settings(**kw) -> TrtllmRepoSettings:
    return TrtllmRepoSettings(engine_dir=ENGINE, **kw)


def rendered(tmp_path: Path, s: TrtllmRepoSettings) -> tuple[Path, dict]:
    out = tmp_path / "repo"
    return out, render_repository(out, s, TOKENIZER)


def parsed(repo: Path) -> dict:
    return {p.parent.name: parse(p.read_text()) for p in repo.glob("*/config.pbtxt")}


def params(cfg) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def dtype_name(t: U.Tensor, logits: str) -> str:
    fixed = {
        "@logits_datatype": logits,
        "@encoder_input_features_data_type": "TYPE_FP16",
        "@prompt_embedding_table_data_type": "TYPE_FP16",
    }
    return fixed[t.dtype] if t.dtype.startswith("@") else f"TYPE_{t.dtype}"


def as_rows(items, inputs: bool) -> list[tuple]:
    m = pb2()
    return [
        (
            i.name,
            m.DataType.Name(i.data_type),
            tuple(i.dims),
            i.HasField("reshape"),
            i.optional if inputs else False,
            i.allow_ragged_batch if inputs else False,
        )
        for i in items
    ]


def upstream_rows(table: tuple[U.Tensor, ...], logits: str, inputs: bool, drop_repeats: set[str] = frozenset()):
    rows, seen = [], set()
    for t in table:
        if t.name in seen and t.name in drop_repeats:
            continue
        seen.add(t.name)
        rows.append((t.name, dtype_name(t, logits), t.dims, t.reshape, t.optional and inputs, t.ragged and inputs))
    return rows


MEDUSA = settings(
    decoding_mode="medusa",
    medusa_choices=((0,), (0, 0), (1,), (0, 1), (0, 0, 0)),
    logits_datatype="TYPE_BF16",
    max_tokens_in_paged_kv_cache=4096,
    decoupled=False,
)


# -- the repository -------------------------------------------------------------------------------------------


def test_configs_parse_back_no_placeholders_and_layout(tmp_path):
    repo, facts = rendered(tmp_path, MEDUSA)
    cfgs = parsed(repo)
    assert set(cfgs) == {"ensemble", "preprocessing", "tensorrt_llm", "postprocessing", "tensorrt_llm_bls"}
    assert facts["models"] and set(facts["models"]) == set(cfgs) and facts["decoding_mode"] == "medusa"
    for path in repo.rglob("*"):
        if path.is_file() and path.suffix in (".pbtxt", ".py", ".json"):
            assert "${" not in path.read_text(encoding="utf-8"), path
    for name in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        assert (repo / name / "1" / "model.py").read_bytes() == (MODELS_DIR / f"{name}.py").read_bytes()
    assert (repo / "tensorrt_llm" / "1").is_dir() and (repo / "ensemble" / "1").is_dir()
    copied = repo / "preprocessing/1/tokenizer/tokenizer.json"
    assert copied.read_bytes() == (TOKENIZER / "tokenizer.json").read_bytes()
    assert cfgs["tensorrt_llm"].backend == "tensorrtllm" and cfgs["ensemble"].platform == "ensemble"
    assert all(c.max_batch_size == 64 for c in cfgs.values())
    assert not any(cfgs[m].model_transaction_policy.decoupled for m in ("tensorrt_llm", "tensorrt_llm_bls"))


@pytest.mark.parametrize(
    "model,inputs,outputs",
    [
        ("tensorrt_llm", U.TENSORRT_LLM_INPUTS, U.TENSORRT_LLM_OUTPUTS),
        ("preprocessing", U.PREPROCESSING_INPUTS, U.PREPROCESSING_OUTPUTS),
        ("postprocessing", U.POSTPROCESSING_INPUTS, U.POSTPROCESSING_OUTPUTS),
        ("tensorrt_llm_bls", U.BLS_INPUTS, U.BLS_OUTPUTS),
        ("ensemble", U.ENSEMBLE_INPUTS, U.ENSEMBLE_OUTPUTS),
    ],
)
def test_tensors_equal_upstream(tmp_path, model, inputs, outputs):
    cfg = parsed(rendered(tmp_path, MEDUSA)[0])[model]
    drop = EXCEPTIONS["deduplicated_outputs"].get(model, set())
    assert as_rows(cfg.input, True) == upstream_rows(inputs, "TYPE_BF16", True)
    assert as_rows(cfg.output, False) == upstream_rows(outputs, "TYPE_BF16", False, drop)


def test_upstream_record_is_wired_consistently():
    """The recorded tables agree with each other along the ensemble's wiring (a transcription check):
    every mapped tensor exists on both sides with one dtype; every intermediate has one producer."""
    tables = {
        U.PREPROCESSING: (U.PREPROCESSING_INPUTS, U.PREPROCESSING_OUTPUTS),
        U.TENSORRT_LLM: (U.TENSORRT_LLM_INPUTS, U.TENSORRT_LLM_OUTPUTS),
        U.POSTPROCESSING: (U.POSTPROCESSING_INPUTS, U.POSTPROCESSING_OUTPUTS),
    }

    def dt(table: tuple[U.Tensor, ...]) -> dict[str, str]:
        return {t.name: dtype_name(t, "TYPE_FP32") for t in table}

    ens_in, ens_out = dt(U.ENSEMBLE_INPUTS), dt(U.ENSEMBLE_OUTPUTS)
    produced: dict[str, str] = {}
    for model, in_map, out_map in U.ENSEMBLE_STEPS:
        step_in, step_out = dt(tables[model][0]), dt(tables[model][1])
        for inner, outer in in_map:
            assert outer in ens_in or outer in produced, (model, outer)
            assert step_in[inner] == ens_in.get(outer, produced.get(outer)), (model, inner)
        for inner, outer in out_map:
            assert outer not in produced, outer
            produced[outer] = step_out[inner]
            if not outer.startswith("_"):
                assert ens_out[outer] == step_out[inner], outer
    assert set(ens_out) <= set(produced)
    assert {t.name for t in U.TENSORRT_LLM_INPUTS if not t.optional} == {"input_lengths", "request_output_len"}


def test_parameter_keys_equal_upstream_and_cover_every_key_the_backend_reads(tmp_path):
    cfgs = parsed(rendered(tmp_path, MEDUSA)[0])
    for model, keys in U.PARAMETER_KEYS.items():
        name = model
        assert set(params(cfgs[name])) == set(keys) - EXCEPTIONS["omitted_parameters"].get(model, set()), model
    llm = params(cfgs["tensorrt_llm"])
    assert set(KEYS_READ) - NOT_IN_TEMPLATE - EXCEPTIONS["omitted_parameters"]["tensorrt_llm"] <= set(llm)
    assert NO_FALLBACK <= set(llm) and "worker_path" not in llm  # worker_path makes the backend throw
    for key, kind in KEYS_READ.items():
        value = llm.get(key)
        if value is None or value == "":
            continue  # absent or "" = the backend's default (checked below for the typed readers)
        if kind == "bool":
            assert value in ("true", "false"), key
        elif kind in ("int", "float", "csv", "choices"):
            assert not reads_as_default(kind, value), (key, value)
        elif kind == "groups":
            id_groups(value)
    for key in ("max_attention_window_size", "sink_token_length", "cross_kv_cache_fraction"):
        assert reads_as_default(KEYS_READ[key], llm[key]), key
    assert llm["gpt_model_path"] == ENGINE and llm["max_tokens_in_paged_kv_cache"] == "4096"
    assert float(llm["kv_cache_free_gpu_mem_fraction"]) == 0.9 and llm["exclude_input_in_output"] == "true"
    assert params(cfgs["preprocessing"])["tokenizer_dir"] == "preprocessing/1/tokenizer"
    assert params(cfgs["postprocessing"])["tokenizer_dir"] == "preprocessing/1/tokenizer"
    assert params(cfgs["tensorrt_llm_bls"])["tensorrt_llm_model_name"] == "tensorrt_llm"


# -- decoding modes and the backend's syntax ---------------------------------------------------------------


def test_medusa_and_eagle_choices_render_in_the_backend_syntax():
    llm = params(all_configs(MEDUSA)["tensorrt_llm"])
    assert llm["decoding_mode"] == "medusa"
    assert llm["medusa_choices"] == "{0}, {0, 0}, {1}, {0, 1}, {0, 0, 0}"
    assert csv_str_to_vec_vec_int(llm["medusa_choices"]) == [list(c) for c in MEDUSA.medusa_choices]
    assert llm["eagle_choices"] == "" and reads_as_default("choices", llm["eagle_choices"])
    eagle = settings(decoding_mode="eagle", eagle_choices=((0,), (1,), (0, 0), (0, 1), (1, 0)))
    llm = params(all_configs(eagle)["tensorrt_llm"])
    assert csv_str_to_vec_vec_int(llm["eagle_choices"]) == [list(c) for c in eagle.eagle_choices]
    assert reads_as_default("choices", llm["medusa_choices"])
    dynamic = params(all_configs(settings(decoding_mode="eagle"))["tensorrt_llm"])  # EAGLE-2: the engine's tree
    assert dynamic["decoding_mode"] == "eagle" and dynamic["eagle_choices"] == ""


def test_lookahead_sizes_render():
    llm = params(all_configs(settings(decoding_mode="lookahead", lookahead=(7, 4, 5)))["tensorrt_llm"])
    assert (
        llm["decoding_mode"],
        llm["lookahead_window_size"],
        llm["lookahead_ngram_size"],
        llm["lookahead_verification_set_size"],
    ) == ("lookahead", "7", "4", "5")
    plain = params(all_configs(settings())["tensorrt_llm"])
    assert plain["decoding_mode"] == "top_k_top_p"
    assert all(reads_as_default("int", plain[k]) for k in ("lookahead_window_size", "lookahead_ngram_size"))


@pytest.mark.parametrize(
    "tp,pp,instances,gpus",
    [
        (1, 1, 1, ((0,),)),
        (2, 1, 1, ((0, 1),)),
        (2, 2, 1, ((0, 1, 2, 3),)),
        (2, 2, 2, ((0, 1, 2, 3), (4, 5, 6, 7))),
        (1, 2, 2, ((3, 2), (1, 0))),
    ],
)
def test_gpu_device_ids_per_instance_for_tp_x_pp(tp, pp, instances, gpus):
    ranks = tuple(tuple(range(1 + i * tp * pp, 1 + (i + 1) * tp * pp)) for i in range(instances))
    s = settings(world_size=tp * pp, tensorrt_llm_instances=instances, gpu_device_ids=gpus, participant_ids=ranks)
    cfg = all_configs(s)["tensorrt_llm"]
    llm = params(cfg)
    assert id_groups(llm["gpu_device_ids"]) == [list(g) for g in gpus]
    assert id_groups(llm["participant_ids"]) == [list(r) for r in ranks]
    assert [g.count for g in cfg.instance_group] == [instances]
    assert id_groups(params(all_configs(settings())["tensorrt_llm"])["gpu_device_ids"]) == []  # all visible GPUs


# -- bad settings -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"decoding_mode": "lookahead"}, "lookahead"),
        ({"decoding_mode": "lookahead", "lookahead": (2, 1, 0)}, "lookahead"),  # N == 1 needs W == 1
        ({"decoding_mode": "lookahead", "lookahead": (4, 3, -1)}, "lookahead"),
        ({"decoding_mode": "lookahead", "lookahead": (4, 3)}, "lookahead"),
        ({"lookahead": (4, 3, 2)}, "lookahead"),  # sizes without lookahead mode
        ({"decoding_mode": "medusa"}, "medusa_choices"),  # the engine's tree is required
        ({"decoding_mode": "medusa", "medusa_choices": ((0,), ())}, "medusa_choices"),  # an empty path
        ({"decoding_mode": "medusa", "medusa_choices": ((0, 1),)}, "medusa_choices"),  # prefix (0,) missing
        ({"decoding_mode": "medusa", "medusa_choices": ((0,), (0,))}, "medusa_choices"),  # duplicate
        ({"decoding_mode": "medusa", "medusa_choices": ((-1,),)}, "medusa_choices"),
        ({"decoding_mode": "medusa", "medusa_choices": (0, 1)}, "medusa_choices"),  # not a list of paths
        ({"decoding_mode": "eagle", "medusa_choices": ((0,),)}, "medusa_choices"),  # wrong mode's choices
        ({"decoding_mode": "top_k_top_p", "eagle_choices": ((0,),)}, "eagle_choices"),
        ({"decoding_mode": "greedy"}, "decoding_mode"),
        ({"decoding_mode": "beam_search"}, "max_beam_width"),
        ({"max_beam_width": 4}, "max_beam_width"),
        ({"world_size": 2, "gpu_device_ids": ((0,),)}, "gpu_device_ids"),  # tp x pp = 2 GPUs per instance
        ({"world_size": 4, "gpu_device_ids": ((0, 1, 2),)}, "gpu_device_ids"),
        ({"world_size": 2, "gpu_device_ids": ((0, 1), (2, 3))}, "gpu_device_ids"),  # 2 groups, 1 instance
        ({"world_size": 2, "gpu_device_ids": ((0, 0),)}, "gpu_device_ids"),
        ({"world_size": 2, "tensorrt_llm_instances": 2, "participant_ids": ((1, 2), (2, 3))}, "participant_ids"),
        ({"model_name": "tensorrt_llm"}, "model_name"),
        ({"model_name": "a/b"}, "model_name"),
        ({"tokenizer_dir": "/abs/tokenizer"}, "tokenizer_dir"),
        ({"tokenizer_dir": "tokenizer"}, "tokenizer_dir"),  # a top-level folder would be taken for a model
        ({"tokenizer_dir": "preprocessing/1/../../x"}, "tokenizer_dir"),
        ({"kv_cache_free_gpu_mem_fraction": 0.0}, "kv_cache_free_gpu_mem_fraction"),
        ({"max_tokens_in_paged_kv_cache": 0}, "max_tokens_in_paged_kv_cache"),
        ({"batch_scheduler_policy": "fcfs"}, "batch_scheduler_policy"),
        ({"batching_strategy": "static"}, "batching_strategy"),
        ({"logits_datatype": "TYPE_FP8"}, "logits_datatype"),
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"decoupled": "yes"}, "decoupled"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(kw, field):
    with pytest.raises(SettingsError) as info:
        all_configs(settings(**kw))
    assert info.value.field == field
    assert isinstance(info.value, ValueError) and isinstance(info.value, UserError)


def test_relative_engine_dir_refused_and_allowed_values_named():
    with pytest.raises(SettingsError, match="absolute") as info:
        TrtllmRepoSettings(engine_dir="engines/x").validate()
    assert info.value.field == "engine_dir"
    with pytest.raises(SettingsError) as info:
        settings(decoding_mode="greedy").validate()
    assert info.value.allowed == ", ".join(U.DECODING_MODES)


def test_lookahead_rule_matches_is_legal_table():
    """LookaheadDecodingConfig::isLegal, by hand on a small table."""
    legal = [(1, 1, 0), (4, 2, 0), (4, 3, 4), (7, 4, 7)]
    illegal = [(0, 3, 3), (3, 0, 3), (2, 1, 0), (1, 1, 1), (4, 3, -1)]
    assert all(U.lookahead_is_legal(*t) for t in legal) and not any(U.lookahead_is_legal(*t) for t in illegal)


# -- all or nothing ---------------------------------------------------------------------------------------------


def test_failed_render_leaves_nothing(tmp_path):
    empty = tmp_path / "no-tokenizer"
    empty.mkdir()
    with pytest.raises(SettingsError) as info:
        render_repository(tmp_path / "repo", MEDUSA, empty)
    assert info.value.field == "tokenizer_src"
    with pytest.raises(SettingsError):
        render_repository(tmp_path / "repo", settings(decoding_mode="lookahead"), TOKENIZER)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-tokenizer"]
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep").write_text("x")
    with pytest.raises(SettingsError, match="not an empty folder"):
        render_repository(busy, MEDUSA, TOKENIZER)
    assert [p.name for p in busy.iterdir()] == ["keep"]
    (tmp_path / "empty").mkdir()
    render_repository(tmp_path / "empty", MEDUSA, TOKENIZER)  # an empty folder is replaced
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


# -- the model files are standalone and `import triton_repo.trtllm` stays light -------------------------------


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add((node.module or "").split(".")[0])
    return out


@pytest.mark.parametrize("name", ["preprocessing", "postprocessing", "tensorrt_llm_bls", "fake_tensorrt_llm"])
def test_model_files_import_only_what_nvidias_container_has(name):
    allowed = {"json", "pathlib", "numpy", "triton_python_backend_utils", "transformers", "__future__"}
    if name == "fake_tensorrt_llm":
        allowed.add("torch")  # the CPU stand-in runs the HF model
    assert _imports(MODELS_DIR / f"{name}.py") <= allowed
    assert "trust_remote_code=" not in (MODELS_DIR / f"{name}.py").read_text().replace(" ", "")


def test_import_stays_light():
    code = (
        "import sys, triton_repo.trtllm; heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'tritonclient', 'transformers', 'tensorrt_llm', 'tensorrt')]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
