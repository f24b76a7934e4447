"""triton_repo: the Triton Inference Server model repository trtspec emits, and the models' code.

    tensors      every tensor the repository's models take or give, defined once
    config       config.pbtxt rendered from ModelConfig protobufs (never templates)
    emit         writes the repository around an engine folder (the `repo` build stage calls it)
    request      a client's tensors → a checked decoding Request (or an error naming the field)
    scheduler    in-flight batching over the Decoder: join between steps, leave when done, cancel
    detok        incremental detokenization that never splits a UTF-8 character
    compat       spec_decoder refuses engines built by other versions
    models/      the Python-backend models (bootstrap model.py + preprocessing, spec_decoder, postprocessing)

Streaming: spec_decoder is decoupled, and so is the ensemble (Triton treats an ensemble with a
decoupled step as decoupled): gRPC streaming (and HTTP generate_stream) get a response per decoding
step through pre → spec_decoder → post; HTTP generate gets one response (stream=false). Triton 2.51
refuses HTTP /infer and gRPC unary infer on decoupled models; a repository built with
`triton.decoupled: false` serves those (one response per request, no streaming). Triton 2.51's
ensemble does not forward cancellation to its steps: clients that must cancel (or may disconnect
mid-stream) call spec_decoder directly with text_input, which answers with text_output itself.
"""
