"""CPU peers for the decode benchmark: ONNX Runtime GenAI and llama.cpp on our target checkpoint.

Each peer converts the HF checkpoint once into the cache (`TRTSPEC_CACHE_DIR`, default
`.trtspec-cache`): `peers/ortgenai-<digest>/` (the model builder's folder) and
`peers/llamacpp-<digest>/model-f32.gguf`, where the digest hashes the checkpoint's files and the
tool's version. Conversion writes a temp folder beside the target and renames it into place, so a
present folder is a complete one. Runners decode one prompt at a time, greedy, with stop tokens
disabled (exactly `max_new` tokens), on a fixed number of threads, and report the target forward
passes they used where the tool exposes them (for τ).

* ONNX Runtime GenAI (0.18): `python -m onnxruntime_genai.models.builder -i HF -o OUT -p fp32 -e cpu`
  (a subprocess, run outside the package's folder: importing `onnxruntime_genai` from inside it
  aborts). Settings go through an `og.Config` overlay: threads as
  `model.decoder.session_options.intra_op_num_threads`, eos off as `model.eos_token_id = []`, and
  n-gram (prompt-lookup) speculation in the top-level `speculative` section (`ngram_size`,
  `max_draft_tokens`): in 0.18 it is not under `search` (the overlay rejects it there).
* llama.cpp (llama-cpp-python): the converter `convert_hf_to_gguf.py` is not in the wheel; it ships in
  the sdist's `vendor/llama.cpp` tree with its `conversion/` package and `gguf-py/`. Point
  `TRTSPEC_LLAMA_CPP_SRC` (or `source=`) at that sdist (.tar.gz) or at a llama.cpp tree; it is needed
  only while the GGUF is not cached. Our fixture's tokenizer is unknown to the converter's
  pre-tokenizer table, so the conversion forces `llama-bpe` (what Llama 3 uses), and it treats a
  missing `tokenizer.model` as "no SentencePiece vocabulary" even without the sentencepiece module.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from builder.export.graph import staged_dir
from builder.stages.decoders import cache_dir as cache_root

NGRAM_SIZE = 3  # ORT GenAI `speculative.ngram_size`; 2 and 3 measured within noise of each other on the fixture
LOOKUP_NGRAM = 2  # llama.cpp LlamaPromptLookupDecoding max_ngram_size: HF prompt lookup's default


class PeerUnavailable(RuntimeError):
    """A peer cannot run here (package missing, converter missing, conversion failed): a skipped row."""


@dataclass
class PeerOutput:
    tokens: list[int]  # the new tokens only
    passes: int | None = None  # target forward passes after prefill; None: the tool does not say
    first_s: float | None = None  # seconds from the call to the first new token (setup + prefill); None: not seen


@dataclass
class Peer:
    """One peer row's runner: `generate(prompt ids, max_new)`; `info` lands in the JSON row."""

    label: str
    engine: str
    generate: Callable[[Sequence[int], int], PeerOutput]
    info: dict[str, Any] = field(default_factory=dict)


# -- conversion -----------------------------------------------------------------------------------


def checkpoint_digest(hf_dir: Path, tool: str) -> str:
    """sha256 over the checkpoint folder's files (names and bytes) and the tool's name/version."""
    h = hashlib.sha256(tool.encode())
    for f in sorted(p for p in Path(hf_dir).iterdir() if p.is_file()):
        h.update(f.name.encode())
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def _cached(name: str, hf_dir: Path, tool: str, produce: Callable[[Path], None]) -> Path:
    """cache/peers/<name>-<digest>, produced into a temp folder and renamed when missing."""
    folder = cache_root() / "peers" / f"{name}-{checkpoint_digest(hf_dir, tool)}"
    if not (folder / "peer.json").is_file():
        with staged_dir(folder) as tmp:
            produce(tmp)
            (tmp / "peer.json").write_text(json.dumps({"tool": tool, "checkpoint": str(hf_dir)}) + "\n")
    return folder


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise PeerUnavailable(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))


def convert_ortgenai(hf_dir: Path) -> Path:
    """The ORT GenAI model folder (genai_config.json, model.onnx) for `hf_dir`, fp32 CPU, cached."""
    version = _version("onnxruntime_genai")

    def produce(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="ortgenai-") as work:  # cwd and HF cache, outside the package
            _run(
                [
                    sys.executable,
                    "-m",
                    "onnxruntime_genai.models.builder",
                    "-i",
                    str(Path(hf_dir).resolve()),
                    "-o",
                    str(out.resolve()),
                    "-p",
                    "fp32",
                    "-e",
                    "cpu",
                    "-c",
                    str(Path(work) / "cache"),
                ],
                Path(work),
                "onnxruntime_genai model builder",
            )

    return _cached("ortgenai", hf_dir, f"onnxruntime-genai {version} fp32 cpu", produce)


# Run inside the converter's folder: force the pre-tokenizer, let a missing tokenizer.model mean "no
# SentencePiece vocabulary" (the converter imports sentencepiece before looking for the file).
_GGUF_CONVERT = """
import runpy, sys
from pathlib import Path
src = sys.argv[1]
sys.path[:0] = [src, src + "/gguf-py"]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
_sentencepiece = base.TextModel._set_vocab_sentencepiece
def _sentencepiece_if_present(self, *args, **kwargs):
    if not (Path(self.dir_model) / "tokenizer.model").is_file():
        raise FileNotFoundError("no tokenizer.model")
    return _sentencepiece(self, *args, **kwargs)
base.TextModel._set_vocab_sentencepiece = _sentencepiece_if_present
sys.argv = [src + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
_CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")


def convert_gguf(hf_dir: Path, source: Path | str | None = None) -> Path:
    """An f32 GGUF of `hf_dir` (cached); `source`: the llama-cpp-python sdist or a llama.cpp tree."""
    version = _version("llama_cpp")
    tool = f"llama-cpp-python {version} f32 llama-bpe"
    folder = cache_root() / "peers" / f"llamacpp-{checkpoint_digest(hf_dir, tool)}"
    if (folder / "peer.json").is_file():
        return folder / "model-f32.gguf"
    source = source or os.environ.get("TRTSPEC_LLAMA_CPP_SRC")
    if not source:
        raise PeerUnavailable(
            "convert_hf_to_gguf.py is not in the llama-cpp-python wheel: set "
            "TRTSPEC_LLAMA_CPP_SRC (or --llama-cpp-src) to its sdist or a llama.cpp tree"
        )

    def produce(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="gguf-") as work:
            src = _converter_tree(Path(source), Path(work))
            _run(
                [
                    sys.executable,
                    "-c",
                    _GGUF_CONVERT,
                    str(src),
                    str(Path(hf_dir).resolve()),
                    "--outtype",
                    "f32",
                    "--outfile",
                    str((out / "model-f32.gguf").resolve()),
                ],
                Path(work),
                "convert_hf_to_gguf.py",
            )

    return _cached("llamacpp", hf_dir, tool, produce) / "model-f32.gguf"


def _converter_tree(source: Path, work: Path) -> Path:
    """The folder holding convert_hf_to_gguf.py: `source` itself, its vendor/llama.cpp, or extracted."""
    for d in (source, source / "vendor" / "llama.cpp"):
        if (d / "convert_hf_to_gguf.py").is_file():
            return d
    if not (source.is_file() and tarfile.is_tarfile(source)):
        raise PeerUnavailable(f"no convert_hf_to_gguf.py in {source}")
    with tarfile.open(source) as tar:
        members = [
            m
            for m in tar.getmembers()
            if "/vendor/llama.cpp/" in m.name
            and any(m.name.split("/vendor/llama.cpp/", 1)[1].startswith(p) for p in _CONVERTER_PARTS)
        ]
        if not members:
            raise PeerUnavailable(f"{source} has no vendor/llama.cpp/convert_hf_to_gguf.py")
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python ≥ 3.11.4
        tar.extractall(work, members=members, **safe)  # type: ignore[arg-type]
    return work / members[0].name.split("/vendor/llama.cpp/", 1)[0] / "vendor" / "llama.cpp"


def _version(module: str) -> str:
    try:
        mod = __import__(module)
    except Exception as e:  # ImportError, or a shared library that fails to load
        raise PeerUnavailable(f"`import {module}` failed: {type(e).__name__}: {e}") from None
    return str(getattr(mod, "__version__", "?"))


# -- runners --------------------------------------------------------------------------------------


def ortgenai_peer(hf_dir: Path, threads: int, ngram: tuple[int, int] | None = None, reuse: bool = False) -> Peer:
    """ORT GenAI greedy (ngram None) or with n-gram speculation (ngram_size, max_draft_tokens). A `Generator` per
    request, as GenAI's own end-to-end benchmark script and examples make one; `reuse` (greedy only): one `Generator`
    for every request, rewound to the start (`rewind_to(0)`) before each — GenAI without its per-request setup."""
    if reuse and ngram is not None:
        raise ValueError("a reused generator is measured for greedy decoding only")
    folder = convert_ortgenai(hf_dir)
    import onnxruntime_genai as og

    overlay: dict[str, Any] = {
        "model": {
            "eos_token_id": [],
            "decoder": {"session_options": {"intra_op_num_threads": threads, "inter_op_num_threads": 1}},
        }
    }
    if ngram is not None:
        overlay["speculative"] = {"ngram_size": ngram[0], "max_draft_tokens": ngram[1]}
    config = og.Config(str(folder))
    config.overlay(json.dumps(overlay))
    model = og.Model(config)

    held: list[Any] = []  # the reused generator, made on first use

    def generate_reused(ids: Sequence[int], max_new: int) -> PeerOutput:
        t0 = time.perf_counter()
        if not held:
            params = og.GeneratorParams(model)
            params.set_search_options(do_sample=False)  # max_length: genai_config's (every prompt + max_new fits)
            held.append(og.Generator(model, params))
        gen = held[0]
        gen.rewind_to(0)
        gen.append_tokens(list(ids))
        gen.generate_next_token()
        first = time.perf_counter() - t0
        for _ in range(max_new - 1):
            gen.generate_next_token()
        tokens = [int(t) for t in gen.get_sequence(0)[len(ids) :]]
        return PeerOutput(tokens, max(len(tokens) - 1, 0), first)

    def generate(ids: Sequence[int], max_new: int) -> PeerOutput:
        t0 = time.perf_counter()
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + max_new, do_sample=False)
        gen = og.Generator(model, params)
        gen.append_tokens(list(ids))  # the prefill
        gen.generate_next_token()  # the first token (its logits are the prefill's)
        first = time.perf_counter() - t0
        while not gen.is_done():
            gen.generate_next_token()
        tokens = [int(t) for t in gen.get_sequence(0)[len(ids) :]]
        if ngram is None:
            return PeerOutput(tokens, max(len(tokens) - 1, 0), first)
        s = gen.get_speculative_stats()  # a fallback step is one plain pass; the first token is the prefill's
        return PeerOutput(tokens, int(s["target_forward_passes"] + s["standard_fallback_steps"]) - 1, first)

    label = "ortgenai greedy" if ngram is None else f"ortgenai n-gram(n={ngram[0]},k={ngram[1]})"
    info = {
        "model_dir": str(folder),
        "threads": threads,
        "config_overlay": overlay,
        "version": _version("onnxruntime_genai"),
        "reused_generator": reuse,
    }
    if reuse:
        return Peer(label + " (reused generator)", "onnxruntime-genai", generate_reused, info)
    return Peer(label, "onnxruntime-genai", generate, info)


def llamacpp_peer(
    hf_dir: Path,
    threads: int,
    lookup: tuple[int, int] | None = None,
    source: Path | str | None = None,
    n_ctx: int = 2048,
) -> Peer:
    """llama.cpp greedy (lookup None) or with LlamaPromptLookupDecoding (max_ngram_size, num_pred_tokens)."""
    _version("llama_cpp")
    gguf = convert_gguf(hf_dir, source)
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = None if lookup is None else LlamaPromptLookupDecoding(max_ngram_size=lookup[0], num_pred_tokens=lookup[1])
    llm = Llama(
        str(gguf),
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        draft_model=draft,
    )
    passes = [0]
    evaluate = llm.eval

    def counted_eval(tokens: Sequence[int]) -> None:  # one call = one forward pass (n_batch ≥ any input)
        passes[0] += 1
        evaluate(tokens)

    llm.eval = counted_eval  # type: ignore[method-assign]

    def generate(ids: Sequence[int], max_new: int) -> PeerOutput:
        llm.reset()  # no prompt-prefix reuse across prompts: every row prefills every prompt in full
        t0 = time.perf_counter()
        passes[0], out, first = 0, [], None
        for tok in llm.generate(list(ids), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            out.append(int(tok))  # generate() never stops on eos: we stop at max_new
            first = time.perf_counter() - t0 if first is None else first
            if len(out) == max_new:
                break
        return PeerOutput(out, passes[0] - 1, first)

    label = "llama.cpp greedy" if lookup is None else f"llama.cpp prompt-lookup(n={lookup[0]},k={lookup[1]})"
    info = {"gguf": str(gguf), "threads": threads, "n_batch": n_ctx, "version": _version("llama_cpp")}
    return Peer(label, "llama.cpp", generate, info)
