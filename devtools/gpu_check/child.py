"""One step of the GPU check in its own process: `python -m devtools.gpu_check.child RESULT.json`.

The runner passes the step's `Context` (and its "module:function") as JSON in GPU_CHECK_CONTEXT. The step's
`Verdict` is written to RESULT.json (temp + rename) before the process exits; a `Skip` / `Fail` raised by the
step is that verdict, any other exception a FAIL with its message (the traceback goes to the output, which the
runner logs). A process that dies before writing — a signal, a CUDA fault, os._exit — is reported by the runner
from its exit status.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from devtools.gpu_check.steps import FAIL, SKIP, Context, Fail, Skip, Verdict


def write_result(path: Path, verdict: Verdict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(verdict.as_dict(), indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_context() -> tuple[Context, str]:
    doc = json.loads(os.environ["GPU_CHECK_CONTEXT"])
    target = doc.pop("target")
    return Context(**doc), target


def run(target: str, ctx: Context) -> Verdict:
    module, _, name = target.partition(":")
    fn: Callable[[Context], object] = getattr(importlib.import_module(module), name)
    try:
        verdict = fn(ctx)
    except Skip as why:
        return Verdict(SKIP, str(why))
    except Fail as why:
        return Verdict(FAIL, str(why))
    except Exception as exc:  # the step's own failure: reported, the runner goes on
        traceback.print_exc()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return Verdict(FAIL, f"{type(exc).__name__}: {first}"[:500])
    if not isinstance(verdict, Verdict):
        return Verdict(FAIL, f"{target} returned {type(verdict).__name__}, not a Verdict")
    return verdict


def inject_step(ctx: Context) -> Verdict:
    """Testing only (--inject): a step that fails, crashes (killed by SIGABRT, no result written) or hangs."""
    kind = ctx.params["kind"]
    print(f"inject-{kind}: injected by --inject (testing the runner)")
    if kind == "crash":
        sys.stdout.flush()
        os.abort()
    if kind == "hang":
        while True:
            time.sleep(1)
    raise Fail("injected failure (--inject fail)")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or "GPU_CHECK_CONTEXT" not in os.environ:
        print(
            "usage: GPU_CHECK_CONTEXT=... python -m devtools.gpu_check.child RESULT.json (the runner calls this)",
            file=sys.stderr,
        )
        return 2
    ctx, target = load_context()
    verdict = run(target, ctx)
    write_result(Path(args[0]), verdict)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
