"""Development tooling that is not part of the product package (`builder`, `plugins`, `triton_repo`): it is not
installed by `pip install trtspec` and nothing in the product imports it. It may import the product. Scripts
(scripts/*.py) put the checkout on sys.path to import it; the tests import it from the repository root.

* `devtools.gpu_check` — the one-shot GPU check (`scripts/gpu_check.sh`) and its wheelhouse
  (`scripts/wheelhouse.sh`).
* `devtools.bench` — the development benchmarks (scripts/bench_*.py, profile_step.py, soak.py).
* `devtools.fixture` — the fixture factory (scripts/make_fixture.py, make_regime_fixture.py).
* `devtools.ort_engines` — ONNX Runtime engines straight from in-memory modules (tests, benchmarks).
* `devtools.verify_cases` — random `tree_verify` cases and the comparison of a face with the reference (the
  plugin's face tests and the GPU check).
"""
