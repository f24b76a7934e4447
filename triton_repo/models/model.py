"""trtspec Triton Python-backend model (bootstrap, copied verbatim into every model of a trtspec repository).

The stub loads this file as `<model>/1/model.py` (python_backend src/pb_stub.cc, `ModelContext::StubSetup`: it appends
`<model>/1` and `<model>` to sys.path and imports `1.model`). Beside it lies the runtime the repository carries,
`trtspec_runtime/` (`triton_repo.runtime`: builder/…, plugins/…, triton_repo/… and runtime.json). It goes first
on sys.path, and the packages runtime.json names resolve only there (`_RuntimeOnly`): a module the runtime lacks
fails with a message naming it, never silently coming from a trtspec installed elsewhere. Third-party packages
(numpy, onnxruntime, tokenizers, …) come from the stub's own environment. The model's config parameters name the
implementation module that does the work (`implementation`, a class `Model(args, params)`); no path is read
from them. Only the standard library is imported before the runtime is in place.
"""

import faulthandler
import importlib
import importlib.abc
import importlib.machinery
import json
import signal
import sys
from pathlib import Path

RUNTIME = "trtspec_runtime"
STACKS_SIGNAL = signal.SIGUSR2  # dumps every thread's stack (`TritonPythonModel.initialize`)


class _RuntimeOnly(importlib.abc.MetaPathFinder):
    """Finds the runtime's packages (and their submodules) in the runtime folder only."""

    def __init__(self, root: Path, packages) -> None:
        self.root, self.packages = str(root), frozenset(packages)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.packages:
            return None
        search = [self.root] if "." not in fullname else path
        spec = importlib.machinery.PathFinder.find_spec(fullname, search)
        if spec is None:
            raise ModuleNotFoundError(
                f"{fullname} is not part of this repository's runtime ({self.root}); rebuild the "
                "repository (trtspec build RECIPE --force)",
                name=fullname,
            )
        return spec


def install_runtime(folder: Path) -> None:
    """Put the runtime in `folder` first on sys.path, its packages resolvable only there."""
    manifest = json.loads((folder / "runtime.json").read_text(encoding="utf-8"))
    if not any(isinstance(f, _RuntimeOnly) for f in sys.meta_path):
        sys.meta_path.insert(0, _RuntimeOnly(folder, manifest["packages"]))
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


class TritonPythonModel:
    def initialize(self, args):
        faulthandler.enable()  # a stub that dies of a signal leaves its Python stacks in the server log
        # `kill -USR2 <stub pid>`: every thread's Python stack goes to the server log, the stub runs on (a hang's
        # where; written from the signal handler, so it works while a stuck thread holds the GIL)
        faulthandler.register(STACKS_SIGNAL, all_threads=True)
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        install_runtime(Path(__file__).resolve().parent / RUNTIME)
        module = importlib.import_module(params["implementation"])
        self.impl = module.Model(args, params)

    def execute(self, requests):
        return self.impl.execute(requests)

    def finalize(self):
        self.impl.finalize()
