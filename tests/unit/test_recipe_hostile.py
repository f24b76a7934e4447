"""Hostile recipe files: every one exits 2 with one located message, no traceback, bounded memory.

Each case is generated here (no committed binaries) and run as `python -m builder.cli …` in its own
process under an address-space limit, so a regression that expands an alias bomb or recurses
without bound fails fast instead of eating the machine. Peak RSS is read per child (`wait4`) and
asserted; wall time is only guarded by a generous timeout (tests do not assert speed, STYLE.md 12),
and `test_report_worst_case` prints the worst time and RSS seen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import yaml

from tests.unit.recipe_helpers import good

REPO = Path(__file__).resolve().parents[2]
ADDRESS_LIMIT = 2 << 30  # RLIMIT_AS per child: torch (imported by `generate`) maps ~0.7 GB of it
MAX_RSS_MB = 300
HANG_GUARD_S = 60  # a hang guard, not a speed assertion
# The child reports its own peak RSS (VmHWM: this process image only; wait4's ru_maxrss would also
# count the pytest process it was forked from, which Linux carries over exec).
CHILD = (
    "import atexit, resource, runpy, sys; limit = int(sys.argv.pop(1)); "
    "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
    "hwm = lambda: [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]; "
    "atexit.register(lambda: print('\\npeak-rss-kb:', hwm(), file=sys.stderr)); "
    "runpy.run_module('builder.cli', run_name='__main__', alter_sys=True)"
)
RSS_MARK = "\npeak-rss-kb: "
GOOD = yaml.safe_dump(good(), sort_keys=False)  # a valid recipe, 20-odd lines


@dataclass
class Case:
    args: list[str]  # after `trtspec`
    expect: list[str]  # fragments that must all appear in stderr (file, line:col, message)


def _w(d: Path, name: str, content: bytes | str) -> str:
    (d / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return name


def _nested_mapping(levels: int) -> str:
    return "".join(f"{'  ' * i}a:\n" for i in range(levels)) + "  " * levels + "x: 1\n"


def _laughs() -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\nmodel: *j\n"


def _symlink(d: Path, name: str, target: str) -> str:
    (d / name).symlink_to(target)
    return name


def _chain(d: Path, n: int) -> str:
    for i in range(n):
        _w(d, f"c{i}.yaml", f"extends: c{i + 1}.yaml\n" if i < n - 1 else GOOD)
    return "c0.yaml"


def _fifo(d: Path) -> str:
    os.mkfifo(d / "pipe.yaml")
    return "pipe.yaml"


def _self_link(d: Path) -> str:
    _symlink(d, "link.yaml", "self.yaml")
    return _w(d, "self.yaml", "extends: link.yaml\n" + GOOD)


def _loop(d: Path) -> str:
    _symlink(d, "la.yaml", "lb.yaml")
    return _symlink(d, "lb.yaml", "la.yaml")


def _medusa_tree(tree_file: str) -> str:
    data = good()
    data["speculative"]["tree"] = tree_file
    return yaml.safe_dump(data, sort_keys=False)


def v(*args: str) -> list[str]:
    return ["validate", *args]


BIG = "9" * 5000
# id -> (make the files in a tmp dir and return the command, expected stderr fragments)
CASES: dict[str, Callable[[Path], Case]] = {
    # bytes and encodings
    "binary": lambda d: Case(v(_w(d, "bin.yaml", bytes(range(256)) * 64)), ["bin.yaml:2:118:", "not UTF-8", "0x80"]),
    "binary-ascii": lambda d: Case(v(_w(d, "ctl.yaml", bytes(range(128)) * 64)), ["ctl.yaml:1:1:", "U+0000"]),
    "non-utf8": lambda d: Case(
        v(_w(d, "latin.yaml", "model:\n  checkpoint: caf\xe9\n".encode("latin-1"))),
        ["latin.yaml:2:18:", "not UTF-8", "0xe9"],
    ),
    "nul-byte": lambda d: Case(v(_w(d, "nul.yaml", b"model:\n  checkpoint: a\x00b\n")), ["nul.yaml:2:16:", "U+0000"]),
    "utf16-bom": lambda d: Case(v(_w(d, "u16.yaml", GOOD.encode("utf-16"))), ["u16.yaml: ", "UTF-16"]),
    "utf32-bom": lambda d: Case(v(_w(d, "u32.yaml", GOOD.encode("utf-32"))), ["u32.yaml: ", "UTF-32"]),
    "lone-surrogate": lambda d: Case(
        v(_w(d, "sur.yaml", 'model: {checkpoint: "\\ud800"}\n')), ["sur.yaml:1:24:", "invalid Unicode"]
    ),  # libyaml refuses it
    "control-escape": lambda d: Case(
        v(_w(d, "ce.yaml", 'model: {checkpoint: "a\\x1bb"}\n')), ["ce.yaml:1:21:", "U+001B"]
    ),
    "escaped-nul-in-extends": lambda d: Case(
        v(_w(d, "esc.yaml", 'extends: "a\\0b.yaml"\n')), ["esc.yaml:1:10:", "U+0000"]
    ),
    # anchors and aliases: nothing is expanded
    "alias-self": lambda d: Case(
        v(_w(d, "self.yaml", "model: &a [*a]\n")), ["self.yaml:1:8:", "anchor &a is not allowed"]
    ),
    "billion-laughs": lambda d: Case(v(_w(d, "lol.yaml", _laughs())), ["lol.yaml:1:4:", "anchor &a", "extends:"]),
    "alias-undefined": lambda d: Case(v(_w(d, "al.yaml", "model: *nowhere\n")), ["al.yaml:1:8:", "alias *nowhere"]),
    "merge-key": lambda d: Case(
        v(_w(d, "mk.yaml", "base: &b {dtype: bf16}\nmodel:\n  <<: *b\n")), ["mk.yaml:1:7:", "anchor &b"]
    ),
    # nesting
    "deep-flow-seq": lambda d: Case(v(_w(d, "deep1.yaml", "model: " + "[" * 100_000)), ["deep1.yaml:1:", "nest"]),
    "deep-flow-map": lambda d: Case(v(_w(d, "deep2.yaml", "{a: " * 100_000)), ["deep2.yaml:1:257:", "deeper than 64"]),
    "deep-block-seq": lambda d: Case(
        v(_w(d, "deep3.yaml", "model:\n" + "- " * 100_000 + "x\n")), ["deep3.yaml:2:127:", "deeper than 64"]
    ),
    "deep-block-map": lambda d: Case(
        v(_w(d, "deep4.yaml", _nested_mapping(200))), ["deep4.yaml:65:129:", "deeper than 64"]
    ),
    "flow-map-as-key": lambda d: Case(v(_w(d, "fk.yaml", "{" * 30)), ["fk.yaml:1:2:", "key must be a string"]),
    # keys
    "duplicate-key": lambda d: Case(
        v(_w(d, "dup.yaml", GOOD + "build: {}\n")), ["dup.yaml:", "duplicate key 'build' (first at line"]
    ),
    "duplicate-nested-key": lambda d: Case(
        v(_w(d, "dup2.yaml", "model:\n  dtype: bf16\n  dtype: fp16\n")),
        ["dup2.yaml:3:3:", "duplicate key 'dtype' (first at line 2)"],
    ),
    "int-key": lambda d: Case(v(_w(d, "ik.yaml", "1: x\n")), ["ik.yaml:1:1:", "key must be a string, not int 1"]),
    "null-key": lambda d: Case(v(_w(d, "nk.yaml", "null: x\n")), ["nk.yaml:1:1:", "not NoneType"]),
    "bool-key": lambda d: Case(v(_w(d, "bk.yaml", "model:\n  true: x\n")), ["bk.yaml:2:3:", "not bool True"]),
    "complex-key": lambda d: Case(v(_w(d, "ck.yaml", "? [a, b]\n: c\n")), ["ck.yaml:1:3:", "not a YAML collection"]),
    # document shape
    "top-level-list": lambda d: Case(
        v(_w(d, "list.yaml", "- " + "1, " * 1000 + "\n")), ["list.yaml:1:1:", "mapping of sections"]
    ),
    "top-level-scalar": lambda d: Case(v(_w(d, "sc.yaml", "hello\n")), ["sc.yaml:1:1:", "not a str"]),
    "empty-file": lambda d: Case(v(_w(d, "empty.yaml", "")), ["empty.yaml: model: required field is missing"]),
    "two-documents": lambda d: Case(
        v(_w(d, "docs.yaml", GOOD + "---\n" + GOOD)), ["docs.yaml:", "second YAML document"]
    ),
    # tags
    "python-tag": lambda d: Case(
        v(_w(d, "py.yaml", 'model: !!python/object/apply:os.system ["true"]\n')),
        ["py.yaml:1:8:", "YAML tag !!python/object/apply:os.system is not allowed"],
    ),
    "binary-tag": lambda d: Case(
        v(_w(d, "b64.yaml", "model: {checkpoint: !!binary aGVsbG8=}\n")), ["b64.yaml:1:21:", "!!binary"]
    ),
    "set-tag": lambda d: Case(v(_w(d, "set.yaml", "model: !!set {a, b}\n")), ["set.yaml:1:8:", "!!set"]),
    "timestamp-tag": lambda d: Case(
        v(_w(d, "ts.yaml", "model: {checkpoint: !!timestamp 2024-01-01}\n")), ["ts.yaml:1:21:", "!!timestamp"]
    ),
    "bad-explicit-int": lambda d: Case(
        v(_w(d, "bi.yaml", 'build: {max_batch_size: !!int "many"}\n')), ["bi.yaml:1:25:", "'many' is not a valid !!int"]
    ),
    # sizes
    "over-size-cap": lambda d: Case(
        v(_w(d, "big.yaml", "# " + "x" * (1 << 20) + "\n")), ["big.yaml: ", "larger than 1048576 bytes"]
    ),
    "directory": lambda d: Case(v(str(d)), [str(d), "is a directory"]),
    "fifo": lambda d: Case(v(_fifo(d)), ["pipe.yaml: ", "not a regular file (a pipe)"]),
    "dev-zero": lambda d: Case(v("/dev/zero"), ["/dev/zero: ", "a device"]),
    "dev-urandom": lambda d: Case(v(_symlink(d, "rand.yaml", "/dev/urandom")), ["rand.yaml: ", "a device"]),
    "long-string": lambda d: Case(
        v(_w(d, "ls.yaml", GOOD.replace("hf://meta-llama", "hf://" + "m" * 1_000_000))),
        ["ls.yaml:", "model.checkpoint", "at most 4096 characters"],
    ),
    "long-implicit-key": lambda d: Case(
        v(_w(d, "lk.yaml", GOOD + "k" * 1_000_000 + ": 1\n")), ["lk.yaml:", "invalid YAML"]
    ),
    "long-explicit-key": lambda d: Case(
        v(_w(d, "lk2.yaml", GOOD + "? " + "k" * 1_000_000 + "\n: 1\n")),
        ["lk2.yaml:", "unknown field", "more characters"],
    ),
    "many-values": lambda d: Case(
        v(_w(d, "many.yaml", "bench: {concurrency: [" + "1," * 400_000 + "1]}\n")),
        ["many.yaml:1:", "more than 100000 YAML values"],
    ),
    "many-unknown-keys": lambda d: Case(
        v(_w(d, "uk.yaml", GOOD + "".join(f"k{i}: 1\n" for i in range(30_000)))),
        ["uk.yaml:", "unknown field", "and 29980 more problems"],
    ),
    # numbers
    "huge-int": lambda d: Case(
        v(_w(d, "hi.yaml", GOOD.replace("max_seq_len: 2048", f"max_seq_len: {10**90}"))),
        ["hi.yaml:", "build.max_seq_len", "allowed: 1..1048576"],
    ),
    "hex-int": lambda d: Case(
        v(_w(d, "hex.yaml", GOOD.replace("max_batch_size: 8", "max_batch_size: 0x7fffffffffffffffff"))),
        ["hex.yaml:", "build.max_batch_size", "allowed: 1..4096"],
    ),
    "5000-digit-int": lambda d: Case(
        v(_w(d, "digits.yaml", GOOD.replace("max_batch_size: 8", f"max_batch_size: {BIG}"))),
        ["digits.yaml:", "5000 characters is too long"],
    ),
    "sexagesimal": lambda d: Case(
        v(_w(d, "sexa.yaml", GOOD.replace("max_batch_size: 8", "max_batch_size: " + "1:" * 30_000 + "1"))),
        ["sexa.yaml:", "too long"],
    ),
    "nan-float": lambda d: Case(
        v(_w(d, "nan.yaml", GOOD.replace("rope_theta: 500000", "rope_theta: .nan"))),
        ["nan.yaml:", "model.architecture.rope_theta", "finite number"],
    ),
    "inf-float": lambda d: Case(
        v(_w(d, "inf.yaml", GOOD + "target: {runtime_reserve_gib: 1e999}\n")), ["inf.yaml:", "duplicate key 'target'"]
    ),
    "inf-float-set": lambda d: Case(
        v(_w(d, "inf2.yaml", GOOD), "--set", "target.runtime_reserve_gib=.inf"),
        ["--set target.runtime_reserve_gib=.inf:1:1: target.runtime_reserve_gib", "finite number"],
    ),
    # extends
    "extends-huge": lambda d: Case(
        v(_w(d, "eh.yaml", f"extends: {_w(d, 'huge.yaml', b'a' * (2 << 20))}\n")), ["huge.yaml: ", "larger than"]
    ),
    "extends-binary": lambda d: Case(
        v(_w(d, "eb.yaml", f"extends: {_w(d, 'b.yaml', bytes(range(128, 256)))}\n")), ["b.yaml:1:1:", "not UTF-8"]
    ),
    "extends-directory": lambda d: Case(
        v(_w(d, "ed.yaml", "extends: .\n")), [": ", "not a regular file (a directory)"]
    ),
    "extends-dev-zero": lambda d: Case(v(_w(d, "ez.yaml", "extends: /dev/zero\n")), ["/dev/zero: ", "a device"]),
    "extends-self-symlink": lambda d: Case(v(_self_link(d)), ["self.yaml", "extends cycle"]),
    "symlink-loop": lambda d: Case(v(_loop(d)), ["lb.yaml: ", "symbolic links"]),
    "extends-chain-40": lambda d: Case(v(_chain(d, 40)), ["c31.yaml:1:10: extends: more than 32 recipe files"]),
    "extends-diamond": lambda d: Case(
        v(_w(d, "fan.yaml", "extends: [" + ", ".join([_w(d, "p.yaml", GOOD)] * 100) + "]\n")),
        ["fan.yaml:1:10: extends: more than 32"],
    ),
    # files a recipe points at
    "checkpoint-symlink-loop": lambda d: Case(
        v(_w(d, "cl.yaml", GOOD.replace("hf://meta-llama/Meta-Llama-3-8B-Instruct", _symlink(d, "ckpt", "ckpt")))),
        ["cl.yaml:2:15: model.checkpoint: cannot resolve 'ckpt'"],
    ),
    "tree-file-binary": lambda d: Case(
        v(_w(d, "tb.yaml", _medusa_tree(_w(d, "t.json", b"\xff\xfe[[0]]")))),
        ["tb.yaml:", "speculative.tree: tree file 't.json' is not UTF-8"],
    ),
    "tree-file-deep": lambda d: Case(
        v(_w(d, "td.yaml", _medusa_tree(_w(d, "t.json", "[" * 100_000)))),
        ["td.yaml:", "speculative.tree: tree file 't.json' is nested too deeply"],
    ),
    # --set values go through the same reader
    "set-alias": lambda d: Case(
        v(_w(d, "s1.yaml", GOOD), "--set", "model=&a [*a]"), ["--set model=&a [*a]:1:1:", "anchor &a"]
    ),
    "set-deep": lambda d: Case(
        v(_w(d, "s2.yaml", GOOD), "--set", "model=" + "[" * 50_000), ["--set model=[[[", "nest"]
    ),
    "set-huge-int": lambda d: Case(
        v(_w(d, "s3.yaml", GOOD), "--set", f"build.max_batch_size={10**90}"),
        ["build.max_batch_size", "allowed: 1..4096"],
    ),
    "set-long-path": lambda d: Case(
        v(_w(d, "s4.yaml", GOOD), "--set", ".".join(["a"] * 1000) + "=1"), ["longer than a recipe"]
    ),
    "set-surrogate": lambda d: Case(
        v(_w(d, "s5.yaml", GOOD), "--set", 'model.checkpoint="\\udfff"'), ["\\udfff", "invalid"]
    ),
    "set-non-utf8-argv": lambda d: Case(v(_w(d, "s7.yaml", GOOD), "--set", "model.checkpoint=caf\udce9"), ["U+DCE9"]),
    "set-two-docs": lambda d: Case(v(_w(d, "s6.yaml", GOOD), "--set", "model=1\n---\n2"), ["second YAML document"]),
    # the other commands load recipes the same way
    "plan-laughs": lambda d: Case(["plan", _w(d, "pl.yaml", _laughs())], ["pl.yaml:1:4:", "anchor &a"]),
    "plan-deep": lambda d: Case(["plan", _w(d, "pd.yaml", "[" * 100_000)], ["pd.yaml:1:", "nest"]),
    "plan-dup": lambda d: Case(
        ["plan", "--json", _w(d, "pdup.yaml", GOOD + "model: {}\n")], ["pdup.yaml:", "duplicate key 'model'"]
    ),
    "generate-binary": lambda d: Case(
        ["generate", _w(d, "gb.yaml", bytes(range(256))), "--prompt-ids", "1"], ["gb.yaml:2:118:", "not UTF-8"]
    ),
    "generate-laughs": lambda d: Case(
        ["generate", _w(d, "gl.yaml", _laughs()), "--prompt-ids", "1"], ["gl.yaml:1:4:", "anchor"]
    ),
    "profile-deep": lambda d: Case(
        ["profile-acceptance", _w(d, "pa.yaml", _nested_mapping(100))], ["pa.yaml:65:129:", "deeper than 64"]
    ),
}


@dataclass
class Outcome:
    rc: int
    stderr: str
    seconds: float
    max_rss_mb: float


def _run(args: list[str], cwd: Path) -> Outcome:
    """One child `python -m builder.cli ARGS` under the address-space limit and the hang guard."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(ADDRESS_LIMIT), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        try:
            proc.wait(HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        seconds = time.monotonic() - start
        err.seek(0)
        stderr = err.read().decode("utf-8", "backslashreplace")
    stderr, _, peak = stderr.rpartition(RSS_MARK)
    return Outcome(proc.returncode, stderr, seconds, int(peak) / 1024 if peak.strip().isdigit() else float("inf"))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[Case, Outcome]]:
    """Every case, run in parallel (one process each)."""

    def one(name: str) -> tuple[str, tuple[Case, Outcome]]:
        d = tmp_path_factory.mktemp(name)
        case = CASES[name](d)
        return name, (case, _run(case.args, d))

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input_is_refused_cleanly(outcomes, name):
    case, out = outcomes[name]
    assert out.rc == 2, (out.rc, out.stderr[-3000:])
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    for fragment in case.expect:
        assert fragment in out.stderr, (fragment, out.stderr[:3000])
    assert all(len(line) <= 1200 for line in out.stderr.splitlines()), "an error line is not clipped"
    assert out.max_rss_mb <= MAX_RSS_MB, f"peak RSS {out.max_rss_mb:.0f} MB"


def test_report_worst_case(outcomes, capsys):
    """Prints the slowest and the largest child (visible with -s); asserts nothing about speed."""
    slow = max(outcomes, key=lambda n: outcomes[n][1].seconds)
    big = max(outcomes, key=lambda n: outcomes[n][1].max_rss_mb)
    with capsys.disabled():
        print(
            f"\nhostile recipes: {len(outcomes)} cases; slowest {slow} {outcomes[slow][1].seconds:.2f} s; "
            f"largest {big} {outcomes[big][1].max_rss_mb:.0f} MB"
        )
    assert len(outcomes) >= 25


@pytest.mark.parametrize(
    "text,expect",
    [
        ('model: {checkpoint: "\\ud800"}', "t.yaml:1:21: control character or lone surrogate U+D800"),
        ("model: " + "[" * 5000, "t.yaml:1:71: YAML nested deeper than 64 levels"),
        ("a: &a [*a]", "t.yaml:1:4: YAML anchor &a is not allowed"),
        ("a: 1\na: 2", "t.yaml:2:1: duplicate key 'a' (first at line 1)"),
    ],
)
def test_pure_python_parser_keeps_the_policy(monkeypatch, text, expect):
    """Without libyaml (PyYAML's own parser) the same inputs are refused the same way, in process."""
    from builder.errors import UserError
    from builder.recipe import yaml_safe

    monkeypatch.setattr(yaml_safe, "_Loader", yaml.SafeLoader)
    with pytest.raises(UserError) as info:
        yaml_safe.parse(text, "t.yaml", yaml_safe.Budget(), mapping=True)
    assert str(info.value).startswith(expect)
