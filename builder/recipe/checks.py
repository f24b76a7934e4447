"""Cross-field recipe checks. Each finding names the field, the problem and the allowed values."""

# trtllm: the recipe's trtllm section has rules of its own, run only for target.backend trtllm

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from builder.errors import UserError
from builder.model.pickled import TARGET, opt_in_error, pickle_to_read
from builder.recipe.findings import Finding, Findings
from builder.recipe.gpus import FP8_DEVICES, GPUS
from builder.recipe.loader import LoadedRecipe
from builder.recipe.resolve import architecture_from_hf, parse_checkpoint, read_config
from builder.recipe.schema import Architecture
from builder.recipe.spec_checks import check_speculative
from builder.recipe.trtllm_checks import check_trtllm, kv_heads_rule
from builder.recipe.yaml_safe import clip
from builder.speculative import registry
from builder.speculative.method import Checks

__all__ = ["Checker", "Finding", "check_recipe"]


class Checker(Findings):
    """Runs every cross-field rule over one loaded recipe, collecting findings."""

    def __init__(self, loaded: LoadedRecipe) -> None:
        super().__init__(loaded)
        self.arch: Architecture | None = None

    def run(self) -> list[Finding]:
        rules = [
            self.checkpoints,
            self.pickles,
            self.parallelism,
            self.target,
            self.fp8,
            self.lengths,
            self.speculative,
        ]
        if self.recipe.target.engine_backend in ("trtllm", "trtllm-llmapi"):
            rules.append(self.trtllm)
        for rule in rules:
            try:
                rule()
            except UserError as exc:
                self.add(_field_of(exc, rule.__name__), exc.message, exc.allowed)
        return self.findings

    def checkpoints(self) -> None:
        m = self.recipe.model
        self.arch = m.architecture
        ref = _ref(self, ("model", "checkpoint"), m.checkpoint)
        if ref is not None and ref.local is not None:
            if not ref.local.is_dir():
                self.add(("model", "checkpoint"), f"checkpoint missing: {ref.local}", warn=True)
            else:
                found = _checkpoint_arch(ref.local)
                self._compare_arch(found)
                self.arch = found
        if m.tokenizer:
            tok = _ref(self, ("model", "tokenizer"), m.tokenizer)
            if tok is not None and tok.local is not None and not tok.local.exists():
                self.add(("model", "tokenizer"), f"tokenizer missing: {tok.local}", warn=True)
        spec = self.recipe.speculative
        own = registry.of(spec).draft
        if own is not None:
            draft = _ref(self, ("speculative", "checkpoint"), spec.checkpoint)
            if draft is not None and draft.local is not None and not draft.local.is_dir():
                self.add(("speculative", "checkpoint"), f"{spec.method} checkpoint missing: {draft.local}", warn=True)
            elif draft is not None and draft.local is not None and own.check_config is not None:
                own.check_config(spec, _config(draft.local), Checks(self.recipe, self.add, draft.local, self.arch))

    def pickles(self) -> None:
        check_pickles(self)

    def _compare_arch(self, found: Architecture) -> None:
        given = self.recipe.model.architecture
        if given is None:
            return
        for name in Architecture.model_fields:
            a, b = getattr(given, name), getattr(found, name)
            if name == "head_dim":
                a, b = given.dim_per_head, found.dim_per_head
            if a != b:
                self.add(("model", "architecture", name), f"recipe says {a}, checkpoint config.json says {b}")

    def parallelism(self) -> None:
        tp, pp = self.recipe.parallelism.tp, self.recipe.parallelism.pp
        if self.arch is None:
            return
        a = self.arch
        if a.num_attention_heads % tp:
            self.add(
                ("parallelism", "tp"),
                f"tp={tp} does not divide num_attention_heads={a.num_attention_heads}",
                allowed=_divisors(a.num_attention_heads),
            )
        if self.recipe.target.engine_backend == "trtllm":
            problem = kv_heads_rule(a.num_kv_heads, tp)
            if problem is not None:
                ok = [
                    d
                    for d in range(1, a.num_attention_heads + 1)
                    if a.num_attention_heads % d == 0 and kv_heads_rule(a.num_kv_heads, d) is None
                ]
                self.add(("parallelism", "tp"), problem, allowed=", ".join(map(str, ok)))
        elif a.num_kv_heads % tp:
            self.add(
                ("parallelism", "tp"),
                f"tp={tp} does not divide num_kv_heads={a.num_kv_heads}",
                allowed=_divisors(a.num_kv_heads),
            )
        if pp > a.num_layers:
            self.add(("parallelism", "pp"), f"pp={pp} exceeds num_layers={a.num_layers}")

    def target(self) -> None:
        t, par = self.recipe.target, self.recipe.parallelism
        if t.device == "cpu":
            if par.tp != 1 or par.pp != 1:
                self.add(
                    ("parallelism",), "the cpu target runs one process: tp and pp must be 1", allowed="tp: 1, pp: 1"
                )
            if t.engine_backend != "onnxruntime":
                self.add(("target", "backend"), f"{t.engine_backend} needs a GPU target", allowed="onnxruntime")
            return
        if t.engine_backend == "onnxruntime":
            self.add(
                ("target", "backend"), f"onnxruntime is the cpu backend, not for {t.device}", allowed="tensorrt, trtllm"
            )
        if t.engine_backend == "tensorrt" and (par.tp > 1 or par.pp > 1):
            self.add(
                ("parallelism",),
                f"trtspec's own TensorRT engines run on one GPU (tp={par.tp}, pp={par.pp}); "
                "tensor and pipeline parallelism run on TensorRT-LLM: set target.backend: trtllm",
                allowed="tp: 1, pp: 1 (or target.backend: trtllm)",
            )
        if t.gpus != par.tp * par.pp:
            self.add(("target", "gpus"), f"gpus={t.gpus} but tp × pp = {par.tp * par.pp}", allowed=str(par.tp * par.pp))

    def fp8(self) -> None:
        q, device = self.recipe.quantization, self.recipe.target.device
        for field, value in ((("quantization", "mode"), q.mode), (("quantization", "kv_cache"), q.kv_cache)):
            if value == "fp8" and device not in FP8_DEVICES:
                cc = ".".join(map(str, GPUS[device].compute_capability))
                self.add(
                    field,
                    f"FP8 needs compute capability ≥ 8.9; {device} has {cc}",
                    allowed="targets " + ", ".join(FP8_DEVICES),
                )
        # The cpu target runs FP8 too: ONNX Runtime executes the Q/DQ graphs (FP8 numerics, fp32 GEMMs).
        if q.kv_cache == "fp8" and self.recipe.target.engine_backend == "tensorrt":
            # TensorRT's KV-cache update (IKVCacheUpdateLayer; the ONNX TensorScatter importer) takes float32 /
            # float16 / bfloat16 caches only (TensorRT operator reference, KVCacheUpdate "T", latest and 11.5.0;
            # onnx-tensorrt docs/operators.md at 10.15, TensorScatter), and no documented layer updates an FP8 cache
            self.add(
                ("quantization", "kv_cache"),
                "trtspec's own TensorRT engines cannot keep an FP8 KV cache: "
                "TensorRT's KV-cache update takes float32/float16/bfloat16 caches only; keep the cache in "
                "model.dtype, or set target.backend: trtllm (TensorRT-LLM's FP8 KV cache)",
                allowed="model_dtype, or target.backend: trtllm",
            )
        own = registry.of(self.recipe.speculative).draft
        draft = None if own is None else own.module
        if q.mode == "fp8" and draft is not None and draft not in q.exclude_modules:
            self.add(
                ("quantization", "exclude_modules"),
                f"FP8 {self.recipe.speculative.method} draft parts are not supported yet; keep {draft!r} in the list",
                allowed=f"a list containing {draft!r}",
            )

    def lengths(self) -> None:
        b = self.recipe.build
        if b.max_seq_len <= b.max_input_len:
            self.add(
                ("build", "max_seq_len"), f"max_seq_len={b.max_seq_len} must exceed max_input_len={b.max_input_len}"
            )
        if self.arch is not None and b.max_seq_len > self.arch.max_position_embeddings:
            self.add(
                ("build", "max_seq_len"),
                f"max_seq_len={b.max_seq_len} exceeds the model's "
                f"max_position_embeddings={self.arch.max_position_embeddings}",
                warn=True,
            )

    def speculative(self) -> None:
        check_speculative(self)

    def trtllm(self) -> None:
        check_trtllm(self)


def _config(directory: Path) -> dict:
    """read_config, with the failures a hostile config.json can cause as UserErrors."""
    try:
        return read_config(directory)
    except UnicodeDecodeError:
        raise UserError(f"{directory}/config.json is not UTF-8 text") from None
    except RecursionError:
        raise UserError(f"{directory}/config.json is nested too deeply") from None


def _checkpoint_arch(directory: Path) -> Architecture:
    """The checkpoint's config.json as architecture numbers; UserError when they are out of range."""
    try:
        return architecture_from_hf(_config(directory), directory)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        raise UserError(f"{directory}/config.json: {where}: {err['msg']}", field="model.checkpoint") from None


def _ref(checker: Checker, field: tuple, text: str):
    try:
        return parse_checkpoint(text, checker.loaded.dir_of(field))
    except UserError as exc:
        checker.add(field, exc.message, exc.allowed)
    except RuntimeError as exc:  # Path.resolve on a symlink loop (Python < 3.13)
        checker.add(field, f"cannot resolve {clip(text)!r}: {exc}")
    return None


def _field_of(exc: UserError, rule: str) -> tuple:
    if exc.field:
        return tuple(exc.field.split("."))
    return {"checkpoints": ("model", "checkpoint"), "speculative": ("speculative",)}.get(rule, (rule,))


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def check_recipe(loaded: LoadedRecipe) -> list[Finding]:
    return Checker(loaded).run()


# -- the pickle opt-in rule --


def check_pickles(c: Findings) -> None:
    """The pickle opt-in rule: a local checkpoint whose only weights are upstream's pickled files needs
    `model.allow_pickle` / `speculative.allow_pickle` — refused here, at validate / plan time, before any stage runs.

    Hub checkpoints (hf://) are not read by validate; the load stage's loaders refuse them the same way
    (`builder.model.pickled` holds the names, for both).
    """
    recipe = c.recipe
    spec = recipe.speculative
    checked = [("model", recipe.model.checkpoint, TARGET, recipe.model.allow_pickle)]
    draft = registry.of(spec).draft
    if draft is not None:
        checked.append(("speculative", spec.checkpoint, draft.layout, spec.allow_pickle))
    for section, text, layout, allowed in checked:
        try:
            ref = parse_checkpoint(text, c.loaded.dir_of((section, "checkpoint")))
        except (UserError, RuntimeError):  # RuntimeError: Path.resolve on a symlink loop (Python < 3.13)
            continue  # the checkpoints rule reports a malformed reference; not a second time here
        if allowed or ref.local is None or not ref.local.is_dir():
            continue
        pickled = pickle_to_read(ref.local, layout)
        if pickled is not None:
            err = opt_in_error(pickled, f"{section}.allow_pickle")
            c.add((section, "allow_pickle"), err.message.replace(pickled.name, str(pickled), 1), err.allowed)
