"""TrtllmRepoSettings: everything the `inflight_batcher_llm` repository is made from, as plain typed data.

    s = TrtllmRepoSettings(engine_dir="/engines/llama3-medusa", decoding_mode="medusa",
                           medusa_choices=((0,), (0, 0), (1,)), world_size=2, gpu_device_ids=((0, 1),))
    s.validate()                      # SettingsError (a ValueError and a UserError) naming the field
    format_choices(s.medusa_choices)  # "{0}, {0, 0}, {1}"   (the C++ backend's syntax)
    format_id_groups(s.gpu_device_ids)  # "0,1"               (',' within an instance, ';' between)

What each value means to TensorRT-LLM's C++ backend (upstream `triton_backend/inflight_batcher_llm/src/
model_instance_state.cc` and `model_state.cc` at the commits in `triton_repo.trtllm.upstream`):

- `gpu_device_ids` / `participant_ids`: one group per `tensorrt_llm` model instance, `;` between groups,
  `,` within one (`utils::split(.., ';')` then `csvStrToVecInt`); instance i takes group i % #groups and
  hands it to the executor's ParallelConfig, one GPU (or MPI rank) per rank of the engine: each group
  holds exactly `world_size` = tp × pp ids. `participant_ids` matter in orchestrator mode only.
- `medusa_choices` / `eagle_choices`: `{0, 0, 0}, {0, 1}` (`csvStrToVecVecInt`): the tree as choices
  (`builder.speculative.choices`: a choice is a path of top-k ranks from the root).
- `decoding_mode`: one of `DECODING_MODES`; `lookahead` needs lookahead_window_size / _ngram_size /
  _verification_set_size or the backend throws at load (`TLLM_THROW` in getExecutorConfigFromParams);
  (W, N, G) must pass `LookaheadDecodingConfig::isLegal` (cpp/tensorrt_llm/executor/decodingConfig.cpp).
- unset optional values render as "" which the backend reads as "not given" (std::stoi/stof throw on
  "", the backend catches and keeps its default); see `triton_repo.trtllm.render`.

`tokenizer_dir` is relative to the repository root (where the server sees the repository, whatever the
mount point): `render_repository` copies the tokenizer there, and trtspec's own pre/post models
resolve it against `args["model_repository"]/..`. `engine_dir` is absolute: the path at which the
server (e.g. NVIDIA's container) sees the engine folder built by `trtllm-build`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import PurePosixPath

import triton_repo.trtllm.upstream as U
from builder.errors import UserError
from builder.speculative.choices import Choice, check_choices


class SettingsError(UserError, ValueError):
    """A bad TrtllmRepoSettings value: names the field and, where there is a set, the allowed values."""


NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a Triton model directory name


@dataclass(frozen=True)
class TrtllmRepoSettings:
    engine_dir: str  # absolute path of the trtllm-build output as the server sees it (gpt_model_path)
    model_name: str = "ensemble"  # the ensemble clients call (text in, text out)
    tokenizer_dir: str = "preprocessing/1/tokenizer"  # relative to the repository root, inside a model's version folder
    max_batch_size: int = 64  # triton_max_batch_size of every model
    decoupled: bool = True  # tensorrt_llm and tensorrt_llm_bls stream (required for `stream` requests)
    max_queue_delay_us: int = 0  # dynamic batching delay of preprocessing and tensorrt_llm
    max_queue_size: int = 0  # default_queue_policy.max_queue_size (0: no limit)
    preprocessing_instances: int = 1
    tensorrt_llm_instances: int = 1  # one executor per instance (GPU groups: gpu_device_ids)
    postprocessing_instances: int = 1
    bls_instances: int = 1
    batching_strategy: str = "inflight_fused_batching"  # gpt_model_type
    batch_scheduler_policy: str = "guaranteed_no_evict"
    kv_cache_free_gpu_mem_fraction: float = 0.9
    max_tokens_in_paged_kv_cache: int | None = None  # None: bounded by the memory fraction only
    max_attention_window_size: int | None = None  # None: the engine's max_seq_len
    enable_chunked_context: bool = False  # needs an engine built with use_paged_context_fmha
    enable_kv_cache_reuse: bool = False  # needs an engine built with use_paged_context_fmha
    exclude_input_in_output: bool = True  # responses carry the new tokens only
    cancellation_check_period_ms: int = 100
    max_beam_width: int = 1
    decoding_mode: str = U.TOP_K_TOP_P_MODE
    medusa_choices: tuple[Choice, ...] = ()  # required for medusa (the engine's tree)
    eagle_choices: tuple[Choice, ...] = ()  # EAGLE-1 static tree; empty: the engine's (EAGLE-2 dynamic tree)
    lookahead: tuple[int, int, int] | None = None  # (W, N, G): window, ngram, verification set
    world_size: int = 1  # tp × pp of the engine
    gpu_device_ids: tuple[tuple[int, ...], ...] = ()  # per tensorrt_llm instance; () = all visible GPUs
    participant_ids: tuple[tuple[int, ...], ...] = ()  # per instance MPI ranks (orchestrator mode)
    logits_datatype: str = "TYPE_FP32"  # context/generation logits (the engine's logits_dtype)
    add_special_tokens: bool = True  # preprocessing: BOS as the tokenizer's post-processor adds it
    skip_special_tokens: bool = True  # postprocessing: drop BOS/EOS from the text
    accumulate_tokens: bool = False  # tensorrt_llm_bls streaming: send the whole text so far, not deltas

    def validate(self) -> "TrtllmRepoSettings":
        """Raise SettingsError on the first bad field; returns self."""
        _check_types(self)
        _check_names(self)
        _check_numbers(self)
        _check_enums(self)
        _check_decoding(self)
        _check_id_groups(self, "gpu_device_ids", unique_across=False)
        _check_id_groups(self, "participant_ids", unique_across=True)
        return self


# -- rendering helpers (the backend's string syntax) ---------------------------------------------------


def format_choices(choices: tuple[Choice, ...]) -> str:
    """`{0, 0, 0}, {0, 1}`: what `utils::csvStrToVecVecInt` reads ("" when there are none)."""
    return ", ".join("{" + ", ".join(str(i) for i in c) + "}" for c in choices)


def format_id_groups(groups: tuple[tuple[int, ...], ...]) -> str:
    """`0,1;2,3`: `utils::split(.., ';')` then `csvStrToVecInt` per instance ("" when there are none)."""
    return ";".join(",".join(str(i) for i in g) for g in groups)


def bool_str(v: bool) -> str:
    return "true" if v else "false"


# -- checks ---------------------------------------------------------------------------------------------


def _err(field: str, message: str, allowed: str | None = None) -> SettingsError:
    return SettingsError(message, field=field, allowed=allowed)


PLAIN_TYPES: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "bool": bool, "str": str}


def _check_types(s: TrtllmRepoSettings) -> None:
    for f in fields(s):
        v = getattr(s, f.name)
        want = PLAIN_TYPES.get(str(f.type))  # annotations are strings here (from __future__ import annotations)
        if want is None:
            continue
        if isinstance(v, bool) and want is not bool:
            raise _err(f.name, f"expected {f.type}, got {v!r}")
        if not isinstance(v, want):
            raise _err(f.name, f"expected {f.type}, got {type(v).__name__} {v!r}")
    for name in ("max_tokens_in_paged_kv_cache", "max_attention_window_size"):
        v = getattr(s, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise _err(name, f"expected an int or None, got {v!r}")


def _check_names(s: TrtllmRepoSettings) -> None:
    if not NAME_RE.match(s.model_name):
        raise _err("model_name", f"{s.model_name!r} is not a model directory name", "letters, digits, _ . -")
    if s.model_name in U.COMPOSING_MODELS:
        raise _err(
            "model_name",
            f"{s.model_name!r} collides with a composing model",
            f"any name but {', '.join(U.COMPOSING_MODELS)}",
        )
    if not s.engine_dir.startswith("/") or "${" in s.engine_dir:
        raise _err("engine_dir", f"{s.engine_dir!r}: expected the absolute path at which the server sees the engine")
    tok = PurePosixPath(s.tokenizer_dir)
    if (
        tok.is_absolute()
        or ".." in tok.parts
        or len(tok.parts) < 3
        or tok.parts[0] not in U.PYTHON_MODELS
        or tok.parts[1] != "1"
    ):
        raise _err(
            "tokenizer_dir",
            f"{s.tokenizer_dir!r}: expected a folder inside a Python model's version "
            "folder, relative to the repository root",
            ", ".join(f"{m}/1/<name>" for m in U.PYTHON_MODELS),
        )


def _check_numbers(s: TrtllmRepoSettings) -> None:
    at_least_1 = (
        "max_batch_size",
        "preprocessing_instances",
        "tensorrt_llm_instances",
        "postprocessing_instances",
        "bls_instances",
        "max_beam_width",
        "world_size",
        "cancellation_check_period_ms",
    )
    for name in at_least_1:
        if getattr(s, name) < 1:
            raise _err(name, f"{getattr(s, name)} < 1", ">= 1")
    for name in ("max_queue_delay_us", "max_queue_size"):
        if getattr(s, name) < 0:
            raise _err(name, f"{getattr(s, name)} < 0", ">= 0")
    if not 0.0 < s.kv_cache_free_gpu_mem_fraction <= 1.0:
        raise _err("kv_cache_free_gpu_mem_fraction", f"{s.kv_cache_free_gpu_mem_fraction}", "(0, 1]")
    for name in ("max_tokens_in_paged_kv_cache", "max_attention_window_size"):
        v = getattr(s, name)
        if v is not None and v < 1:
            raise _err(name, f"{v} < 1", ">= 1 or None")


def _check_enums(s: TrtllmRepoSettings) -> None:
    enums = (
        ("batching_strategy", U.BATCHING_STRATEGIES),
        ("decoding_mode", U.DECODING_MODES),
        ("batch_scheduler_policy", U.SCHEDULER_POLICIES),
        ("logits_datatype", U.LOGITS_DATATYPES),
    )
    for name, allowed in enums:
        if getattr(s, name) not in allowed:
            raise _err(name, f"{getattr(s, name)!r} is not one of upstream's values", ", ".join(allowed))


def _check_decoding(s: TrtllmRepoSettings) -> None:
    mode = s.decoding_mode
    if (mode == U.BEAM_SEARCH_MODE) != (s.max_beam_width > 1):
        raise _err(
            "max_beam_width",
            f"{s.max_beam_width} with decoding_mode {mode!r}: beam_search needs a beam "
            "width > 1 and every other mode (speculative ones included) a width of 1",
        )
    for name, owner in (("medusa_choices", U.MEDUSA_MODE), ("eagle_choices", U.EAGLE_MODE)):
        choices = getattr(s, name)
        if choices and mode != owner:
            raise _err(
                name, f"set, but decoding_mode is {mode!r} (the backend would ignore it)", f"decoding_mode {owner}"
            )
        _check_choice_shapes(name, choices)
    if mode == U.MEDUSA_MODE and not s.medusa_choices:
        raise _err(
            "medusa_choices",
            "empty: decoding_mode medusa needs the engine's tree (the backend would "
            "fall back to mc_sim_7b_63, which need not fit the engine's max_draft_len)",
        )
    if mode == U.LOOKAHEAD_MODE and s.lookahead is None:
        raise _err(
            "lookahead",
            "decoding_mode lookahead needs (window, ngram, verification set): the backend "
            "refuses to load without lookahead_window_size, _ngram_size, _verification_set_size",
        )
    if s.lookahead is not None:
        if mode != U.LOOKAHEAD_MODE:
            raise _err("lookahead", f"set, but decoding_mode is {mode!r}", "decoding_mode lookahead")
        ok = len(s.lookahead) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in s.lookahead)
        if not ok or not U.lookahead_is_legal(*s.lookahead):
            raise _err("lookahead", f"(W, N, G) = {s.lookahead!r} is not legal", U.LOOKAHEAD_RULE)


def _check_choice_shapes(name: str, choices: tuple[Choice, ...]) -> None:
    shaped = isinstance(choices, (tuple, list)) and all(
        isinstance(c, (tuple, list)) and all(isinstance(i, int) and not isinstance(i, bool) for i in c) for c in choices
    )
    if not shaped:
        raise _err(name, f"{choices!r}: expected a sequence of paths, each a sequence of ints")
    problems = check_choices([tuple(c) for c in choices], None)
    if problems:
        raise _err(name, "; ".join(problems[:3]), "non-empty paths of top-k ranks >= 0, unique, prefix-closed")


def _check_id_groups(s: TrtllmRepoSettings, name: str, unique_across: bool) -> None:
    groups = getattr(s, name)
    if not groups:
        return
    shaped = all(
        isinstance(g, (tuple, list)) and all(isinstance(i, int) and not isinstance(i, bool) for i in g) for g in groups
    )
    if not shaped:
        raise _err(name, f"{groups!r}: expected one sequence of ints per tensorrt_llm instance")
    if len(groups) != s.tensorrt_llm_instances:
        raise _err(
            name,
            f"{len(groups)} groups for {s.tensorrt_llm_instances} tensorrt_llm instance(s)",
            "one group per instance",
        )
    for g in groups:
        if len(g) != s.world_size:
            raise _err(
                name,
                f"group {list(g)} has {len(g)} ids, the engine has world_size {s.world_size} (tp x pp)",
                f"{s.world_size} ids per group",
            )
        if any(i < 0 for i in g) or len(set(g)) != len(g):
            raise _err(name, f"group {list(g)}: ids must be distinct and >= 0")
    flat = [i for g in groups for i in g]
    if unique_across and len(set(flat)) != len(flat):
        raise _err(name, f"{[list(g) for g in groups]}: an MPI rank serves one instance only")
