"""CI engine builds: `trtspec ci` over a recipe matrix, checks, regression gates, publishing, `trtspec pull`.

    matrix    the matrix file (recipes × `--set` variants, gates, checks): schema and expansion into entries
    runner    one entry: validate, plan, build what this host can run (needs-GPU stops are not failures)
    checks    lossless (greedy tokens = the oracle), acceptance and speed (τ, tokens/s vs plain), FP8 quality
    gates     this run against a baseline run's JSON (τ, speed ratio, FP8 agreement); same recipe set only
    report    the JSON summary, JUnit XML and the markdown job summary
    publish   stages content-addressed to a directory or fsspec URI, index last; pull restores a cache
    session   one whole run: entries in order, gates, publish, the summary

Nothing here is imported by `import builder`; torch, onnxruntime and fsspec are imported inside the
functions that need them.
"""
