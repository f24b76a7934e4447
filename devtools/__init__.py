"""Development tooling that is not part of the product package (`builder`, `plugins`, `triton_repo`): it is not
installed by `pip install trtspec` and nothing in the product imports it. It may import the product.

* `devtools.gpu_check` — the one-shot GPU check (`scripts/gpu_check.sh`) and its wheelhouse
  (`scripts/wheelhouse.sh`).
"""
