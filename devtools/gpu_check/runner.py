"""The GPU check's runner: every step of `devtools.gpu_check.steps` in its own child process, under one budget.

    scripts/gpu_check.sh [--budget-s 480] [--out DIR] [--steps GLOB,..] [--skip GLOB,..] [--list] ...

For each step, in order, the moment it ends, one line:

    PASS|FAIL|SKIP <step> (<seconds> s): <reason>

A step SKIPs when a fact it needs is missing on this host (the preflight says which and why) or when the
budget has less left than the step's estimate; otherwise it runs as `python -m devtools.gpu_check.child` in a
new process group, with a timeout of min(its own limit, what is left of the budget), its output streamed to
the console (prefixed "  | ") and the log. A timeout, a crash (a signal, a CUDA fault that poisons the child's
context) or an exception is that step's FAIL; the next step runs regardless.

After every step (and before each starts) `gpu_check.json` — the preflight, every verdict so far with its
details and the tail of its output, the step running, the steps pending — and `gpu_check.log` are written into
$OUT when it is set (the device tool's result folder), else into --out (default out/gpu_check): a run that is
killed leaves the evidence up to that point. SIGTERM / SIGINT stop the running step's process group, record it
as interrupted and exit 128 + the signal. The exit code is 0 when no step FAILed, else 1.

Standard library only, so it starts on any Python ≥ 3.11 whatever the host lacks; the steps import what they
need in their own processes.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import fnmatch
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from devtools.gpu_check.steps import (
    ENGINE_DTYPES,
    ENGINE_RECIPES,
    FAIL,
    INJECT,
    PASS,
    REPO,
    SKIP,
    Context,
    Step,
    Verdict,
    plan,
)

JSON_NAME, LOG_NAME = "gpu_check.json", "gpu_check.log"
ALWAYS = ("wheelhouse", "preflight")  # run whatever --steps selects: every other step's needs come from them
TAIL_LINES = 40  # output lines kept per step in the JSON (the log has all of them)
KILL_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this long


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/gpu_check.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--budget-s", type=float, default=480.0, help="global time budget in seconds (default 480)")
    ap.add_argument("--out", help="where gpu_check.json and gpu_check.log go (default: $OUT, else out/gpu_check)")
    ap.add_argument("--work-dir", help="builds, caches, the wheelhouse's site folder (default out/gpu_check_work)")
    ap.add_argument(
        "--cache-dir",
        help="the trtspec build cache of the engine / TensorRT-LLM steps (default "
        "<work-dir>/cache; content-addressed, reruns reuse it)",
    )
    ap.add_argument("--json", help="also write gpu_check.json here (after every step, like the one in --out)")
    ap.add_argument(
        "--wheelhouse",
        help="folder of .whl files installed offline when missing here (default .whl "
        "when it holds wheels; 'none' to ignore it)",
    )
    ap.add_argument(
        "--steps", default="", help="comma-separated globs of the steps to run (wheelhouse and preflight always run)"
    )
    ap.add_argument("--skip", default="", help="comma-separated globs of steps not to run")
    ap.add_argument("--list", action="store_true", help="print the steps with their estimates and exit")
    ap.add_argument("--preflight-only", action="store_true", help="run the wheelhouse and preflight steps only")
    ap.add_argument("--device", default="auto", help="target.device of the TensorRT builds (default: from the GPU)")
    ap.add_argument(
        "--engine-recipes", default=",".join(ENGINE_RECIPES), help="recipes/<name>.yaml of the engine steps"
    )
    ap.add_argument("--engine-dtypes", default=",".join(ENGINE_DTYPES), help="model.dtype of the engine steps")
    ap.add_argument("--prompts", type=int, default=3, help="prompts decoded per engine step (at most 4)")
    ap.add_argument("--tokens", type=int, default=48, help="tokens generated per prompt")
    ap.add_argument("--python", default=sys.executable, help="the interpreter the steps run in")
    ap.add_argument("--quiet", action="store_true", help="print verdicts only (the log still has everything)")
    ap.add_argument(
        "--inject",
        default="",
        help=f"testing only: add steps that {'/'.join(INJECT)} (comma-separated) right after the preflight",
    )
    ap.add_argument("--inject-timeout-s", type=float, default=None, help="testing only: the injected steps' limit")
    args = ap.parse_args(argv)
    bad = [k for k in _split(args.inject) if k not in INJECT]
    if bad:
        ap.error(f"--inject {','.join(bad)}: allowed {', '.join(INJECT)}")
    return args


def _split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def select(steps: list[Step], only: tuple[str, ...], skip: tuple[str, ...]) -> list[Step]:
    """The steps --steps / --skip leave (wheelhouse and preflight are always kept)."""

    def wanted(s: Step) -> bool:
        if s.name in ALWAYS:
            return True
        if only and not any(fnmatch.fnmatchcase(s.name, g) for g in only):
            return False
        return not any(fnmatch.fnmatchcase(s.name, g) for g in skip)

    return [s for s in steps if wanted(s)]


class Run:
    """One run: the verdicts, the budget, the JSON and the log (module docstring)."""

    def __init__(self, args: argparse.Namespace, steps: list[Step], out: Path, work: Path) -> None:
        self.args, self.steps, self.out, self.work = args, steps, out, work
        self.start = time.monotonic()
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.results: list[dict[str, Any]] = []
        self.facts: dict[str, Any] = {}
        self.running: str | None = None
        self.step_t0 = self.start
        self.interrupted: str | None = None
        self.child: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.log: TextIO = open(out / LOG_NAME, "w", encoding="utf-8")  # noqa: SIM115 (closed in finish)
        self.site = work / f"site-py{sys.version_info.major}.{sys.version_info.minor}"

    # -- output ------------------------------------------------------------------------------------------------

    def say(self, line: str, console: bool = True) -> None:
        with self.lock:
            if console:
                print(line, flush=True)
            self.log.write(line + "\n")
            self.log.flush()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def write_json(self, finished: bool = False) -> None:
        done = {r["name"] for r in self.results}
        counts = collections.Counter(r["status"] for r in self.results)
        doc = {
            "format": 1,
            "started": self.started,
            "host": platform.node(),
            "python": sys.version.split()[0],
            "budget_s": self.args.budget_s,
            "elapsed_s": round(self.elapsed(), 2),
            "finished": finished,
            "interrupted": self.interrupted,
            "running": self.running,
            "running_pid": self.child.pid if self.child is not None else None,
            "counts": {k: counts.get(k, 0) for k in (PASS, FAIL, SKIP)},
            "exit_code": self.exit_code() if finished else None,
            "preflight": self.facts,
            "steps": self.results,
            "pending": [s.name for s in self.steps if s.name not in done and s.name != self.running],
            "log": LOG_NAME,
        }
        text = json.dumps(doc, indent=1, default=str) + "\n"
        for path in [self.out / JSON_NAME] + ([Path(self.args.json)] if self.args.json else []):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)  # never half-written

    def exit_code(self) -> int:
        if self.interrupted:
            return 128 + int(signal.Signals[self.interrupted])
        return 1 if any(r["status"] == FAIL for r in self.results) else 0

    # -- steps -------------------------------------------------------------------------------------------------

    def record(self, step: Step, verdict: Verdict, seconds: float, tail: list[str]) -> None:
        self.results.append(
            {
                "name": step.name,
                "status": verdict.status,
                "seconds": round(seconds, 2),
                "reason": verdict.reason,
                "details": verdict.details,
                "needs": list(step.needs),
                "est_s": step.est_s,
                "output_tail": tail,
            }
        )
        self.say(f"{verdict.status} {step.name} ({seconds:.1f} s): {verdict.reason}")
        self.running = None
        self.write_json()

    def why_not(self, step: Step) -> str | None:
        """Why `step` cannot run here, or None."""
        if step.name in ALWAYS or step.name.startswith("inject-"):
            pass
        elif not self.facts:
            return "no preflight facts (the preflight step did not report)"
        else:
            have, why = self.facts.get("have", {}), self.facts.get("why", {})
            missing = [n for n in step.needs if not have.get(n)]
            if missing:
                return "; ".join(f"{n}: {why.get(n, 'not available')}" for n in missing)
        left = self.args.budget_s - self.elapsed()
        if left < step.est_s:
            return f"needs ~{step.est_s} s, {max(left, 0):.0f} s of the {self.args.budget_s:.0f} s budget left"
        return None

    def context(self, step: Step) -> dict[str, Any]:
        cache = Path(self.args.cache_dir).resolve() if self.args.cache_dir else self.work / "cache"
        ctx = Context(
            repo=str(REPO),
            out_dir=str(self.out),
            work_dir=str(self.work),
            cache_dir=str(cache),
            device=self.args.device,
            prompts=self.args.prompts,
            tokens=self.args.tokens,
            facts=self.facts,
            params=dict(step.params),
            step=step.name,
        )
        doc = dataclasses.asdict(ctx)
        doc["target"] = step.target
        if step.name == "wheelhouse":
            doc["params"] = {"wheelhouse": self.wheelhouse(), "site": str(self.site)}
        return doc

    def wheelhouse(self) -> str | None:
        chosen = self.args.wheelhouse
        if chosen == "none":
            return None
        if chosen:
            return str(Path(chosen).resolve())
        default = REPO / ".whl"
        return str(default) if any(default.glob("*.whl")) else None

    def env(self, step: Step) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(self.site)] if self.site.is_dir() else []
        paths += [str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env["PYTHONUNBUFFERED"] = "1"
        ctx = self.context(step)
        env["GPU_CHECK_CONTEXT"] = json.dumps(ctx, default=str)
        env["TRTSPEC_CACHE_DIR"] = ctx["cache_dir"]  # `trtspec generate` (no --cache-dir) finds the steps' builds
        return env

    def run_step(self, step: Step) -> None:
        reason = self.why_not(step)
        if reason is not None:
            self.record(step, Verdict(SKIP, reason), 0.0, [])
            return
        limit = min(float(step.timeout_s), self.args.budget_s - self.elapsed())
        if step.name.startswith("inject-") and self.args.inject_timeout_s is not None:
            limit = self.args.inject_timeout_s
        result = self.work / "results" / f"{step.name}.json"
        result.parent.mkdir(parents=True, exist_ok=True)
        result.unlink(missing_ok=True)
        self.running, self.step_t0 = step.name, time.monotonic()
        self.say(f"-- {step.name}: {step.what} (limit {limit:.0f} s)", console=not self.args.quiet)
        t0 = time.monotonic()
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        cmd = [self.args.python, "-m", "devtools.gpu_check.child", str(result)]
        try:
            self.child = subprocess.Popen(
                cmd,
                cwd=REPO,
                env=self.env(step),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:  # e.g. --python names no interpreter: this step fails, the next one is tried
            self.record(step, Verdict(FAIL, f"could not start {cmd[0]}: {exc}"), time.monotonic() - t0, [])
            return
        self.write_json()  # with the child's pid: a run killed from outside leaves it on record
        reader = threading.Thread(target=self._pump, args=(self.child, tail), daemon=True)
        reader.start()
        timed_out = False
        try:
            rc = self.child.wait(timeout=max(limit, 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = self.stop_child()
        except Interrupted:
            self.stop_child()
            reader.join(KILL_GRACE_S)
            self.child = None
            raise
        try:  # whatever the step left running in its process group (a server, a build) goes with it
            os.killpg(self.child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        reader.join(KILL_GRACE_S)
        self.child = None
        seconds = time.monotonic() - t0
        self.record(step, self.verdict(step, result, rc, timed_out, limit, list(tail)), seconds, list(tail))

    def _pump(self, proc: subprocess.Popen[str], tail: collections.deque[str]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            self.say(f"  | {line}", console=not self.args.quiet)

    def stop_child(self) -> int:
        """SIGTERM the running child's process group, SIGKILL it after a grace period; its exit code."""
        proc = self.child
        if proc is None:
            return 0
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                return proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                continue
        return proc.wait()

    def verdict(self, step: Step, result: Path, rc: int, timed_out: bool, limit: float, tail: list[str]) -> Verdict:
        last = next((line for line in reversed(tail) if line.strip()), "")
        if timed_out:
            cause = "its own limit" if limit >= step.timeout_s else "the budget's remainder"
            return Verdict(FAIL, f"timed out after {limit:.0f} s ({cause}); last output: {last[:200]!r}")
        try:
            got = json.loads(result.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit code {rc}"
            return Verdict(FAIL, f"{how} before reporting a result; last output: {last[:300]!r}")
        v = Verdict(str(got.get("status")), str(got.get("reason", "")), dict(got.get("details") or {}))
        if v.status not in (PASS, FAIL, SKIP):
            return Verdict(FAIL, f"reported an unknown status {v.status!r}: {v.reason}", v.details)
        if rc != 0 and v.status != FAIL:
            return Verdict(FAIL, f"exit code {rc} after reporting {v.status}: {v.reason}", v.details)
        return v

    def after(self, step: Step) -> None:
        """The preflight's facts become every later step's; print the PREFLIGHT line and the hazards."""
        if step.name != "preflight" or not self.results or self.results[-1]["name"] != "preflight":
            return
        details = self.results[-1]["details"]
        self.facts = dict(details.get("facts") or {})
        if details.get("line"):
            self.say(f"PREFLIGHT {details['line']}")
        for hazard in details.get("hazards") or []:
            self.say(f"HAZARD {hazard}")
        self.write_json()

    def finish(self) -> int:
        counts = collections.Counter(r["status"] for r in self.results)
        self.write_json(finished=True)
        where = self.out / JSON_NAME
        state = f"interrupted by {self.interrupted}, " if self.interrupted else ""
        self.say(
            f"SUMMARY {counts.get(PASS, 0)} PASS, {counts.get(FAIL, 0)} FAIL, {counts.get(SKIP, 0)} SKIP in "
            f"{self.elapsed():.1f} s ({state}budget {self.args.budget_s:.0f} s) -> {where}"
        )
        failed = [r["name"] for r in self.results if r["status"] == FAIL]
        if failed:
            self.say(f"FAILED: {', '.join(failed)}")
        self.log.close()
        return self.exit_code()


def list_steps(steps: list[Step]) -> str:
    head = f"{'step':36} {'est s':>6} {'limit s':>7}  {'needs':34} what"
    lines = [head, "-" * len(head)]
    for s in steps:
        lines.append(f"{s.name:36} {s.est_s:>6} {s.timeout_s:>7}  {','.join(s.needs) or '-':34} {s.what}")
    total = sum(s.est_s for s in steps)
    lines.append(f"total estimate {total} s ({total / 60:.1f} min) on one H100 with everything installed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    steps = plan(_split(args.engine_recipes), _split(args.engine_dtypes), inject=_split(args.inject))
    steps = select(steps, _split(args.steps), _split(args.skip))
    if args.preflight_only:
        steps = [s for s in steps if s.name in ALWAYS]
    if args.list:
        print(list_steps(steps))
        return 0
    out = Path(args.out or os.environ.get("OUT") or REPO / "out" / "gpu_check").resolve()
    work = Path(args.work_dir or REPO / "out" / "gpu_check_work").resolve()
    run = Run(args, steps, out, work)

    def on_signal(signum: int, _frame: Any) -> None:
        raise Interrupted(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    run.say(f"gpu_check: {len(steps)} steps, budget {args.budget_s:.0f} s, results -> {out / JSON_NAME}")
    run.write_json()
    try:
        for step in steps:
            run.run_step(step)
            run.after(step)
    except Interrupted as stop:
        run.interrupted = str(stop)
        if run.running is not None:
            step = next(s for s in steps if s.name == run.running)
            run.record(step, Verdict(FAIL, f"interrupted by {stop} while running"), time.monotonic() - run.step_t0, [])
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
    return run.finish()
