"""`trtspec train-draft`'s rows cache (builder/train/rows_cache.py): a second draft of one target on the same data reads
the first one's training rows instead of making them again.

Oracle: the rows a run makes with an empty cache (the target writes the responses again). Rows read from the cache
must equal them (the record's sha256 over tokens and mask); a damaged cache file is never trained on; a change of
the data makes new rows, a change of training alone does not."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from click.testing import CliRunner

from builder.cli import cli
from builder.train import rows_cache
from builder.train.train_draft import key_of

REPO = Path(__file__).resolve().parents[2]
EAGLE3, MEDUSA = REPO / "recipes" / "tiny-llama3-eagle3.yaml", REPO / "recipes" / "tiny-llama3-medusa.yaml"
DATA = (  # one data section for both methods (the recipes' own differ): 24 prompts, 16 target tokens each
    "draft_training.source=builtin:stdlib",
    "draft_training.generate_responses=true",
    "draft_training.num_samples=24",
    "draft_training.seq_len=48",
    "draft_training.response_tokens=16",
    "draft_training.generation_batch=8",
    "draft_training.batch=4",
)


def _train(recipe: Path, out: Path, cache: Path, *extra: str) -> tuple[dict, str]:
    sets = [a for s in (*DATA, *extra) for a in ("--set", s)]
    args = ["train-draft", str(recipe), "--out", str(out), "--steps", "2", "--device", "cpu"]
    args += ["--threads", str(torch.get_num_threads()), "--cache-dir", str(cache), *sets]
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads((out / "training.json").read_text())["training_rows"], res.output


def _cached(cache: Path) -> list[Path]:
    return sorted((cache / rows_cache.SUBDIR).glob("*.safetensors"))


def test_a_second_draft_of_the_target_reads_the_rows_the_first_made(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, out1 = _train(EAGLE3, tmp_path / "e3", cache, "draft_training.draft_vocab_size=256")
    assert first["from"] == "made" and "rows cache" not in out1
    (file,) = _cached(cache)
    second, out2 = _train(MEDUSA, tmp_path / "medusa", cache)  # another method, the same data
    assert second["from"] == str(file) and "training rows from the rows cache" in out2
    fresh, _ = _train(MEDUSA, tmp_path / "medusa-fresh", tmp_path / "empty")  # the oracle: made again
    assert fresh["from"] == "made"
    assert first["sha256"] == second["sha256"] == fresh["sha256"]
    assert first["count"] == 24 and first["tokens"] == second["tokens"] == fresh["tokens"]
    assert not list(file.parent.glob("*.tmp"))  # written whole, renamed

    # training settings alone: the same rows; a data setting: new rows, the old file kept
    other_lr, _ = _train(MEDUSA, tmp_path / "medusa-lr", cache, "draft_training.lr=3e-4")
    assert other_lr["from"] == str(file)
    other_n, _ = _train(MEDUSA, tmp_path / "medusa-n", cache, "draft_training.num_samples=20")
    assert other_n["from"] == "made" and other_n["count"] == 20 and len(_cached(cache)) == 2


def test_a_damaged_cache_file_is_made_again_never_trained_on(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    made, _ = _train(MEDUSA, tmp_path / "a", cache)
    (file,) = _cached(cache)
    raw = bytearray(file.read_bytes())
    raw[-9] ^= 0x01  # one bit of the last tensor's bytes: still a readable safetensors file, other rows
    file.write_bytes(bytes(raw))
    again, output = _train(MEDUSA, tmp_path / "b", cache)
    assert "unreadable" in output and again["from"] == "made" and again["sha256"] == made["sha256"]
    assert rows_cache.load(cache, file.stem)[0] is not None  # made and written again, whole
    file.write_bytes(b"not safetensors")
    last, output = _train(MEDUSA, tmp_path / "c", cache)
    assert "unreadable" in output and last["sha256"] == made["sha256"]


def test_generation_fields_count_only_where_the_target_generates() -> None:
    base = {
        "settings": {
            "source": "builtin:stdlib",
            "num_samples": 8,
            "seq_len": 32,
            "generate_responses": False,
            "response_tokens": 16,
            "generation_batch": 4,
            "lr": 1e-3,
        },
        **{k: k for k in ("target", "tokenizer", "source", "versions", "device", "dtype", "threads")},
    }

    def key(**settings) -> str:
        return key_of(rows_cache.rows_inputs({**base, "settings": {**base["settings"], **settings}}, {}))

    assert key(generation_batch=8) == key() == key(response_tokens=8) == key(lr=1.0)
    assert key(generate_responses=True) != key(generate_responses=True, generation_batch=8)
    assert key(generate_responses=True) != key(generate_responses=True, response_tokens=8)
    assert key(num_samples=9) != key() != key(seq_len=33)
