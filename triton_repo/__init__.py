"""triton_repo: the Triton Inference Server model repository trtspec emits, and the models' code.

    tensors      every tensor the repository's models take or give, defined once
    config       config.pbtxt rendered from ModelConfig protobufs (never templates)
    emit         writes the repository around an engine folder (the `repo` build stage calls it)
    request      a client's tensors → a checked decoding Request (or an error naming the field)
    scheduler    in-flight batching over the Decoder: join between steps, leave when done, cancel, fail
                 locally, bounded queue, deadlines (jobs: what it hands around, its counters, log lines)
    metrics      Triton custom metrics from the models' counters (pb_utils.MetricFamily)
    relay        the front model ↔ spec_decoder link (JSON lines over a local Unix socket)
    watch        which stub processes serve a model, and are they alive (/proc)
    faults       fault injection at the engine boundary (tests only)
    detok        incremental detokenization that never splits a UTF-8 character
    compat       spec_decoder refuses engines built by other versions (ONNX Runtime; TensorRT's version lock:
                 TensorRT, compute capability, tree_verify plugin digest)
    runtime      the code the repository carries (copied into every model, resolved only there): the repository
                 is relocatable and imports nothing from the build environment's trtspec
    models/      the Python-backend models (bootstrap model.py + the front model, spec_decoder,
                 preprocessing, postprocessing)

spec_decoder opens its engine folder — ONNX Runtime (cpu targets, KIND_CPU) or TensorRT (GPU targets, KIND_GPU on
the recipe's GPUs) — through the backend-neutral `builder.engines.folder.open_engine`.

Clients call the front model (`triton.model_name`): text in, text out; it relays each request to
spec_decoder over a local socket (`relay`: Triton 2.51's decoupled BLS corrupts the caller's heap),
forwards the client's cancellation (Triton 2.51's ensembles do not) and answers with an error at once
when spec_decoder dies or breaks, then reloads it. Streaming: spec_decoder and the
front are decoupled: gRPC streaming (and HTTP generate_stream) get a response per decoding step; HTTP
generate gets one response (stream=false). Triton 2.51 refuses HTTP /infer and gRPC unary infer on
decoupled models; a repository built with `triton.decoupled: false` serves those (one response per
request, no streaming). Clients may also call spec_decoder directly (text or token ids); cancellation
works there too. The server should run with --model-control-mode=explicit --load-model=*: that is what
lets a broken spec_decoder report unready (by unloading itself) and the front reload it.
"""
