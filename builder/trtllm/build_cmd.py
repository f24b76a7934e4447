"""The exact `trtllm-build` command for a recipe (TensorRT-LLM 1.2.x), with a manifest of why each flag is there.

    cmd = build_command(recipe, "ckpt/", "engine/", tree_dir=loaded.dir_of(tree_field(recipe)))
    cmd.argv        # ["trtllm-build", "--checkpoint_dir", "ckpt/", ...]
    cmd.manifest()  # {"flags": [{flag, value, recipe_field, why}, ...], "tensorrt_llm": "1.2.1", ...}
    write_build_script(cmd, folder)   # folder/build.sh + folder/build.json (+ folder/check_engine.py: the lock)

Every flag and value below was checked against TensorRT-LLM's own parser and builder (NVIDIA/TensorRT-LLM, the
newest versions in the source index: the 1.2 development line, whose `tensorrt_llm/version.py` is stored at
1.2.0rc2 @b35ac1b and 1.2.0rc8 @0c8de69; the 1.2.1 wheel itself was not readable here):
- `tensorrt_llm/commands/build.py` (@65f1d15): `parse_arguments` (the flag set, `--speculative_decoding_mode`
  choices, `--kv_cache_type` through `KVCacheType.from_string`, case-insensitive continuous|paged|disabled per
  `cpp/include/tensorrt_llm/runtime/modelConfig.h`), `main` (refuses `--gather_context_logits` with
  `--max_draft_len` > 0, and `--multiple_profiles enable` with `--opt_num_tokens`; caps `--workers` at the
  visible GPU count).
- `tensorrt_llm/plugin/plugin.py` (@c20322f): `cli_plugin_args` + `add_plugin_argument`: boolean features take
  `enable|disable`; `--gemm_plugin` takes auto|float16|float32|bfloat16|int32|fp8|nvfp4|disable and
  `--gpt_attention_plugin` auto|float16|float32|bfloat16|int32|disable. `use_parallel_embedding` is NOT a
  build flag: it belongs to checkpoint conversion (`examples/models/core/llama/convert_checkpoint.py`), so
  it is recorded as a note, not emitted.
- `tensorrt_llm/builder.py` (`build`, the version with the pydantic PluginConfig): silently raises
  max_num_tokens to max_batch_size × (max_draft_len + 1), clips max_input_len to max_seq_len, turns
  paged context FMHA on for EAGLE, turns FP8 context FMHA off without FP8 quantization and on for an FP8 KV
  cache with paged context FMHA, and asserts max_batch_size ≤ 512 and max_draft_len ≤ 256 for EAGLE. trtspec
  refuses those combinations instead, so the manifest says what the engine really is.
- examples/eagle/README.md (@585c756): pipeline parallelism is not supported with EAGLE; EAGLE-2 is a
  runtime switch (`eagle_use_dynamic_tree`, `eagle_dynamic_tree_max_top_k`) on the same engine, and
  num_eagle_layers / max_non_leaves_per_layer are checkpoint-conversion settings — no build flag.
- examples/lookahead/README.md (@83ab45a): Lookahead needs `--speculative_decoding_mode lookahead_decoding`
  and `--max_draft_len` = (0 if N == 1 else N-2) + (W-1+G)(N-1), equal to the runtime's (W, N, G).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.handoffs import TrtllmBuildJson
from builder.recipe.gpus import GPUS
from builder.recipe.resolve import max_draft_len, tree_size
from builder.recipe.schema import Recipe
from builder.speculative import registry
from builder.trtllm import compat
from builder.trtllm.flow import engine_flow

PLUGIN_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}  # model.dtype -> plugin dtype
BUILDER = "tensorrt_llm/builder.py"


@dataclass(frozen=True)
class Flag:
    """One trtllm-build argument: its value (None for a bare switch), the recipe field it comes from, why."""

    flag: str
    value: str | None
    recipe_field: str  # a dotted recipe path, or "derived: …" when trtspec fixes or computes it
    why: str


@dataclass(frozen=True)
class BuildCommand:
    """argv (starting with `trtllm-build`) and the per-flag manifest; the dirs are the first two flags."""

    flags: tuple[Flag, ...]
    trtllm_version: str
    tensorrt_version: str
    target: dict[str, Any]  # device, compute capability, tp, pp, world size
    notes: tuple[dict[str, str], ...] = field(default=())  # settings that are not build flags (and where they go)

    @property
    def argv(self) -> list[str]:
        out = ["trtllm-build"]
        for f in self.flags:
            out += [f.flag] if f.value is None else [f.flag, f.value]
        return out

    def value(self, flag: str) -> str | None:
        for f in self.flags:
            if f.flag == flag:
                return f.value
        raise KeyError(flag)

    @property
    def checkpoint_dir(self) -> str:
        return str(self.value("--checkpoint_dir"))

    @property
    def output_dir(self) -> str:
        return str(self.value("--output_dir"))

    def with_dirs(self, checkpoint_dir: str | None = None, output_dir: str | None = None) -> BuildCommand:
        """The same command reading/writing other folders (e.g. the engine stage's temp folder)."""
        new = {"--checkpoint_dir": checkpoint_dir, "--output_dir": output_dir}
        flags = tuple(replace(f, value=new[f.flag]) if new.get(f.flag) is not None else f for f in self.flags)
        return replace(self, flags=flags)

    def manifest(self) -> dict[str, Any]:
        """build.json (`builder.handoffs.TrtllmBuildJson`; the bundle's check_engine.py reads it as plain JSON)."""
        return {
            "format": TrtllmBuildJson.FORMAT,
            "tool": "trtllm-build",
            "tensorrt_llm": self.trtllm_version,
            "tensorrt": self.tensorrt_version,
            "target": self.target,
            "argv": self.argv,
            "flags": [
                {"flag": f.flag, "value": f.value, "recipe_field": f.recipe_field, "why": f.why} for f in self.flags
            ],
            "notes": list(self.notes),
        }


def _switch(on: bool) -> str:
    return "enable" if on else "disable"


def _fp8_context_fmha(recipe: Recipe) -> tuple[bool, str]:
    t, q = recipe.trtllm, recipe.quantization
    if t.use_fp8_context_fmha is not None:
        return t.use_fp8_context_fmha, "trtllm.use_fp8_context_fmha"
    on = q.mode == "fp8" and q.kv_cache == "fp8"
    return on, (
        f"derived: {'on' if on else 'off'} (quantization.mode={q.mode}, quantization.kv_cache={q.kv_cache}; "
        "trtllm.use_fp8_context_fmha unset)"
    )


def _gemm_plugin(recipe: Recipe) -> tuple[str, str]:
    t, q = recipe.trtllm, recipe.quantization
    if t.gemm_plugin is not None:
        return t.gemm_plugin, "trtllm.gemm_plugin"
    value = "fp8" if q.mode == "fp8" else "auto"
    return value, f"derived: {value} (quantization.mode={q.mode}; trtllm.gemm_plugin unset)"


def _refuse(recipe: Recipe, draft_len: int, tree_nodes: int) -> None:
    """Raise UserError for what TensorRT-LLM 1.2.x refuses, asserts on, or silently changes at build time."""
    r, b, spec = recipe, recipe.build, recipe.speculative
    if r.target.engine_backend != "trtllm":
        raise UserError(
            f"the trtllm-build command is for target.backend trtllm, not {r.target.engine_backend}",
            field="target.backend",
            allowed="trtllm",
        )
    if r.target.device == "cpu":
        raise UserError("TensorRT-LLM engines run on GPUs", field="target.device", allowed=", ".join(GPUS))
    if b.max_input_len > b.max_seq_len:
        raise UserError(
            f"max_input_len={b.max_input_len} > max_seq_len={b.max_seq_len}: {BUILDER} would clip it silently",
            field="build.max_input_len",
            allowed=f"1..{b.max_seq_len}",
        )
    fp8 = r.quantization.mode == "fp8" or r.quantization.kv_cache == "fp8"
    if fp8 and not GPUS[r.target.device].fp8:
        raise UserError(
            f"FP8 needs compute capability >= 8.9; {r.target.device} has "
            f"{'.'.join(map(str, GPUS[r.target.device].compute_capability))}",
            field="quantization.mode",
            allowed="none (or an sm89+ device: " + ", ".join(k for k, g in GPUS.items() if g.fp8) + ")",
        )
    _refuse_fp8_kernels(recipe)
    flow = engine_flow(spec.method)  # validate refuses the methods this line does not serve first
    if not registry.of(spec).drafts:
        return
    need = b.max_batch_size * (draft_len + 1)
    if b.max_num_tokens < need:
        raise UserError(
            f"max_num_tokens={b.max_num_tokens} < max_batch_size × (max_draft_len + 1) = {need}: {BUILDER} "
            "would raise it silently",
            field="build.max_num_tokens",
            allowed=f">= {need}",
        )
    if not flow.exact_draft_len and draft_len < tree_nodes:  # exact: the method's refuse_build says so
        raise UserError(
            f"max_draft_len={draft_len} is smaller than the tree ({tree_nodes} draft nodes)",
            field="build.max_draft_len",
            allowed=f">= {tree_nodes}",
        )
    if flow.refuse_build is not None:
        flow.refuse_build(spec, recipe, draft_len, tree_nodes)


def _refuse_fp8_kernels(recipe: Recipe) -> None:
    t, q = recipe.trtllm, recipe.quantization
    gemm, _ = _gemm_plugin(recipe)
    if gemm == "fp8" and q.mode != "fp8":
        raise UserError(
            "gemm_plugin fp8 needs FP8 weights with their calibration (plugin.py: gemm_plugin)",
            field="trtllm.gemm_plugin",
            allowed="auto, bfloat16, float16",
        )
    fp8_fmha, _ = _fp8_context_fmha(recipe)
    if fp8_fmha and q.mode != "fp8":
        raise UserError(
            f"FP8 context FMHA needs FP8 quantization; {BUILDER} would turn it off silently",
            field="trtllm.use_fp8_context_fmha",
            allowed="false, null",
        )
    if fp8_fmha and t.use_paged_context_fmha and q.kv_cache != "fp8":
        raise UserError(
            f"FP8 paged context FMHA needs an FP8 KV cache; {BUILDER} would turn it off silently",
            field="trtllm.use_fp8_context_fmha",
            allowed="false, null (or quantization.kv_cache: fp8)",
        )
    if not fp8_fmha and t.use_paged_context_fmha and q.mode == "fp8" and q.kv_cache == "fp8":
        raise UserError(
            f"an FP8 KV cache with paged context FMHA needs FP8 context FMHA; {BUILDER} would turn it on silently",
            field="trtllm.use_fp8_context_fmha",
            allowed="true, null",
        )


def _speculation_flags(recipe: Recipe, draft_len: int) -> list[Flag]:
    s = recipe.speculative
    method = s.method
    flow = engine_flow(method)
    mode = flow.build_mode
    if mode is None:
        return []
    source = flow.draft_len_source(s) if flow.draft_len_source else None
    if recipe.build.max_draft_len is not None:
        draft_field = "build.max_draft_len"
    elif source is not None:
        draft_field = source
    else:
        draft_field = "derived: draft nodes in speculative.tree (root excluded)"
    return [
        Flag(
            "--speculative_decoding_mode",
            mode,
            "speculative.method",
            f"{method} -> {mode} (the trtllm-build choice for this method)",
        ),
        Flag(
            "--max_draft_len",
            str(draft_len),
            draft_field,
            "draft tokens verified per step; TensorRT-LLM adds it to max_seq_len internally",
        ),
    ]


def _notes(recipe: Recipe) -> tuple[dict[str, str], ...]:
    notes = [
        {
            "setting": "trtllm.use_parallel_embedding",
            "value": str(recipe.trtllm.use_parallel_embedding).lower(),
            "where": "checkpoint conversion (config.json `use_parallel_embedding`), not a trtllm-build flag",
        }
    ]
    flow = engine_flow(recipe.speculative.method)
    if flow.notes is not None:
        notes += flow.notes(recipe.speculative)
    notes.append(
        {
            "setting": "gather_context_logits",
            "value": "never set",
            "where": "build.py refuses it with max_draft_len > 0; trtspec does not emit it",
        }
    )
    return tuple(notes)


def build_command(
    recipe: Recipe, checkpoint_dir: str, output_dir: str, *, tree_dir: Path | None = None
) -> BuildCommand:
    """The trtllm-build command for `recipe` (UserError for what TensorRT-LLM would refuse or change silently).

    `tree_dir`: where a tree .json path in the recipe is relative to (`loaded.dir_of(tree_field(recipe))`)."""
    base = tree_dir if tree_dir is not None else Path.cwd()
    drafts = registry.of(recipe.speculative).drafts
    nodes = tree_size(recipe, base) if drafts else 0
    draft_len = max_draft_len(recipe, base) if drafts else 0
    _refuse(recipe, draft_len, nodes)
    b, t, p = recipe.build, recipe.trtllm, recipe.parallelism
    world = p.tp * p.pp
    gemm, gemm_field = _gemm_plugin(recipe)
    fp8_fmha, fp8_fmha_field = _fp8_context_fmha(recipe)
    flags = [
        Flag(
            "--checkpoint_dir",
            checkpoint_dir,
            "derived: the checkpoint stage's folder",
            "TensorRT-LLM checkpoint (config.json + rank{N}.safetensors)",
        ),
        Flag("--output_dir", output_dir, "derived: the engine stage's folder", "rank{N}.engine + config.json go here"),
        Flag("--max_batch_size", str(b.max_batch_size), "build.max_batch_size", "sequences per engine step"),
        Flag("--max_input_len", str(b.max_input_len), "build.max_input_len", "longest prompt"),
        Flag("--max_seq_len", str(b.max_seq_len), "build.max_seq_len", "prompt + generated tokens per sequence"),
        Flag("--max_num_tokens", str(b.max_num_tokens), "build.max_num_tokens", "tokens per engine pass (batch)"),
        Flag(
            "--max_beam_width",
            "1",
            "derived: 1 (speculative decoding and trtspec's decoding use one beam)",
            "no beam search",
        ),
        Flag(
            "--kv_cache_type",
            "paged",
            "derived: paged (in-flight batching and speculative decoding need it)",
            "paged KV cache",
        ),
        Flag("--tokens_per_block", str(b.tokens_per_block), "build.tokens_per_block", "paged KV block size"),
        Flag(
            "--workers",
            str(t.workers or world),
            "trtllm.workers" if t.workers else f"derived: tp × pp = {world} (trtllm.workers unset)",
            "ranks built in parallel (capped at visible GPUs)",
        ),
        Flag("--gpt_attention_plugin", PLUGIN_DTYPE[recipe.model.dtype], "model.dtype", "attention plugin dtype"),
        Flag("--gemm_plugin", gemm, gemm_field, "cuBLASLt GEMM plugin (fp8: FP8 GEMMs with the checkpoint's scales)"),
        Flag(
            "--use_paged_context_fmha",
            _switch(t.use_paged_context_fmha),
            "trtllm.use_paged_context_fmha",
            "context FMHA over the paged KV cache (chunked context, KV reuse)",
        ),
        Flag("--use_fp8_context_fmha", _switch(fp8_fmha), fp8_fmha_field, "FP8 context attention (FP8 KV cache)"),
        Flag(
            "--multiple_profiles",
            _switch(t.multiple_profiles),
            "trtllm.multiple_profiles",
            "several TensorRT optimization profiles (longer build, faster kernels)",
        ),
        *_speculation_flags(recipe, draft_len),
    ]
    gpu = GPUS[recipe.target.device]
    target = {
        "device": recipe.target.device,
        "gpu": gpu.name,
        "compute_capability": list(gpu.compute_capability),
        "tp": p.tp,
        "pp": p.pp,
        "world_size": world,
    }
    return BuildCommand(tuple(flags), t.version, t.release.tensorrt, target, _notes(recipe))


# -- build.sh / build.json ----------------------------------------------------------------------------------

LOCK_SCRIPT = "check_engine.py"  # builder/trtllm/compat.py, copied verbatim beside build.sh (standard library only)


def _build_steps() -> list[str]:
    """build.sh after `args=(...)`: preflight, trtllm-build into a stage folder, engine.json, rename into place."""
    return [
        "# 1. This container can build the engine: the pinned TensorRT-LLM, a GPU of the target's compute capability.",
        f'"$PYTHON" "$HERE/{LOCK_SCRIPT}" preflight --build-json "$HERE/build.json"',
        "# 2. trtllm-build into a stage folder beside ENGINE_DIR (into ENGINE_DIR itself when it is an empty folder,",
        "#    e.g. the mount `docker-run.sh build` gives it); any failure removes what was written, so ENGINE_DIR",
        "#    either keeps its previous engine or receives a complete one with its engine.json.",
        'name="$(basename "$ENGINE_DIR")"',
        'mkdir -p "$(dirname "$ENGINE_DIR")"',
        'parent="$(cd "$(dirname "$ENGINE_DIR")" && pwd)"',
        'ENGINE_DIR="$parent/$name"',
        'if [ -d "$ENGINE_DIR" ] && [ -z "$(find "$ENGINE_DIR" -mindepth 1 -maxdepth 1 -print -quit)" ]; then',
        '  stage="$ENGINE_DIR"',
        'elif [ -d "$ENGINE_DIR" ] && command -v mountpoint >/dev/null && mountpoint -q "$ENGINE_DIR"; then',
        '  echo "build.sh: $ENGINE_DIR is a mount point holding files; a new engine cannot be renamed onto it:" \\',
        '    "empty it first, or run \\`bash docker-run.sh build\\`" >&2',
        "  exit 2",
        "else",
        '  stage="$(mktemp -d "$parent/.$name.build.XXXXXX")"',
        "fi",
        "cleanup() {",
        '  if [ -z "$stage" ]; then return; fi',
        '  if [ "$stage" = "$ENGINE_DIR" ]; then find "$ENGINE_DIR" -mindepth 1 -delete; else rm -rf "$stage"; fi',
        "}",
        "trap cleanup EXIT",
        "trap 'exit 130' INT",
        "trap 'exit 143' TERM",
        '"$TRTLLM_BUILD" --checkpoint_dir "$CHECKPOINT_DIR" --output_dir "$stage" "${args[@]}"',
        "# 3. The engine lock: versions read here, the GPU, the build manifest, every file's size and sha256.",
        f'"$PYTHON" "$HERE/{LOCK_SCRIPT}" lock "$stage" --build-json "$HERE/build.json" \\',
        '  --checkpoint-dir "$CHECKPOINT_DIR" --output-dir "$ENGINE_DIR"',
        'if [ "$stage" != "$ENGINE_DIR" ]; then',
        '  chmod 755 "$stage"',
        '  old="$parent/.$name.old.$$"',
        '  rm -rf "$old"',
        '  if [ -e "$ENGINE_DIR" ]; then mv "$ENGINE_DIR" "$old"; fi',
        '  mv "$stage" "$ENGINE_DIR"',
        '  rm -rf "$old"',
        "fi",
        'stage=""',
        'echo "build.sh: engine and engine.json in $ENGINE_DIR"',
    ]


def render_build_script(cmd: BuildCommand, lock: bool = True) -> str:
    """bash: `set -euo pipefail`, CHECKPOINT_DIR / ENGINE_DIR / TRTLLM_BUILD / PYTHON overridable, one comment per flag.

    `lock` (the bundle's build.sh): check the host first, build into a stage folder, write engine.json with
    check_engine.py (beside build.sh with build.json), then rename into ENGINE_DIR. Without it (the record the
    engine stage keeps beside an engine it built and locked itself): the bare trtllm-build command."""
    lines = [
        "#!/usr/bin/env bash",
        f"# trtllm-build for TensorRT-LLM {cmd.trtllm_version} (TensorRT {cmd.tensorrt_version}), written by trtspec.",
        f"# Target: {cmd.target['gpu']} (sm{''.join(map(str, cmd.target['compute_capability']))}), "
        f"tp={cmd.target['tp']} pp={cmd.target['pp']}. Each flag's recipe field is in the comment above it.",
        *(
            [
                "# Run it inside the recipe's container on a host with the target GPU (or `bash docker-run.sh build`); it",
                f"# writes ENGINE_DIR = the engine and its lock engine.json ({LOCK_SCRIPT} lock), which launch.sh checks.",
            ]
            if lock
            else ["# The command trtspec ran; engine.json beside it was written by trtspec (trtllm/compat.py)."]
        ),
        "set -euo pipefail",
        *(
            [
                "# HERE: this script's folder (the default directories below are relative to it)",
                'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
            ]
            if lock or "$HERE" in cmd.checkpoint_dir + cmd.output_dir
            else []
        ),
        f'CHECKPOINT_DIR="${{CHECKPOINT_DIR:-{cmd.checkpoint_dir}}}"',
        f'ENGINE_DIR="${{ENGINE_DIR:-{cmd.output_dir}}}"',
        'TRTLLM_BUILD="${TRTLLM_BUILD:-trtllm-build}"',
        *(['PYTHON="${PYTHON:-python3}"'] if lock else []),
        "args=(",
    ]
    for f in cmd.flags:
        if f.flag in ("--checkpoint_dir", "--output_dir"):
            continue
        lines.append(f"  # {f.recipe_field}: {f.why}".replace("\n", " "))
        lines.append("  " + " ".join(shlex.quote(x) for x in ([f.flag] if f.value is None else [f.flag, f.value])))
    lines.append(")")
    if lock:
        lines += [*_build_steps(), ""]
    else:
        lines += ['exec "$TRTLLM_BUILD" --checkpoint_dir "$CHECKPOINT_DIR" --output_dir "$ENGINE_DIR" "${args[@]}"', ""]
    return "\n".join(lines)


BUILD_KNOBS = ("CHECKPOINT_DIR", "ENGINE_DIR", "TRTLLM_BUILD", "PYTHON")  # build.sh's environment (docker-run.sh -e)


def _atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_build_script(cmd: BuildCommand, folder: Path, lock: bool = True) -> tuple[Path, Path]:
    """`folder/build.sh` (executable) and `folder/build.json` (the manifest), each written to a temp file and renamed;
    with `lock`, also `folder/check_engine.py` (builder/trtllm/compat.py verbatim), which build.sh runs."""
    folder.mkdir(parents=True, exist_ok=True)
    sh, js = folder / "build.sh", folder / "build.json"
    if lock:
        _atomic_write(folder / LOCK_SCRIPT, Path(compat.__file__).read_text(encoding="utf-8"), 0o755)
    _atomic_write(sh, render_build_script(cmd, lock), 0o755)
    _atomic_write(js, json.dumps(cmd.manifest(), indent=2) + "\n")
    return sh, js
