"""trtspec Triton Python-backend model (bootstrap, copied verbatim into every model of a trtspec repository).

The stub imports this file with its own sys.path; the model's config parameters carry the project's
paths (`python_paths`, appended: the stub's own NumPy stays first), the Python version they belong to
and the implementation module that does the work (`implementation`, a class `Model(args, params)`).
Only the standard library is imported before the paths are in place.
"""

import faulthandler
import importlib
import json
import sys


class TritonPythonModel:
    def initialize(self, args):
        faulthandler.enable()  # a stub that dies of a signal leaves its Python stacks in the server log
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        want = params.get("python_version", "")
        have = f"{sys.version_info.major}.{sys.version_info.minor}"
        if want and want != have:
            raise RuntimeError(f"{config['name']}: this repository was emitted for Python {want}; the Triton "
                               f"Python-backend stub runs Python {have}")
        for path in json.loads(params.get("python_paths", "[]")):
            if path not in sys.path:
                sys.path.append(path)
        module = importlib.import_module(params["implementation"])
        self.impl = module.Model(args, params)

    def execute(self, requests):
        return self.impl.execute(requests)

    def finalize(self):
        self.impl.finalize()
