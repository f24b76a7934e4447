"""config.pbtxt rendered from typed `ModelConfig` protobufs (tritonclient's model_config_pb2), never templates.

    cfg = spec_decoder_config(settings)      # a ModelConfig
    text = render(cfg)                       # google.protobuf.text_format
    parse(text)                              # back to a ModelConfig (tests, `trtspec serve` checks)

A missing value cannot happen: every field is set from typed data, and unknown fields fail at once. No config
holds a filesystem path (the repository is relocatable): the engine folder and tokenizer are named relative to
the model's version folder, and the code the models run travels inside the repository (`triton_repo.runtime`).
Instance groups: spec_decoder is KIND_GPU on the recipe's GPUs when its engine is TensorRT (Triton passes each
instance its `model_instance_kind` / `model_instance_device_id`: python_backend src/stub_launcher.cc `ModelInstanceStubProcess`); the front
model, preprocessing and postprocessing are KIND_CPU (they run no engine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from triton_repo import tensors as T


def pb2():
    """tritonclient's model_config_pb2 (the serve extra), imported on first use."""
    try:
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:  # tritonclient or grpcio missing
        raise ImportError(
            "rendering Triton configs needs tritonclient[grpc] (the serve extra: bash scripts/setup.sh)"
        ) from exc
    return model_config_pb2


@dataclass(frozen=True)
class RepositorySettings:
    """What the configs are made from (the recipe's triton section plus the engine's limits)."""

    model_name: str = "trtspec"
    instances: tuple[int, int, int] = (1, 1, 1)  # preprocessing, spec_decoder, postprocessing
    decoupled: bool = True
    queue_delay_us: int = 100  # spec_decoder waits this long for more requests before a batch starts from idle
    draft_schedule: tuple[tuple[int, int], ...] = ()
    max_input_len: int = 1024
    ort_threads: int = 1
    gpus: tuple[int, ...] = ()  # spec_decoder's GPUs (KIND_GPU, `instances[1]` on each); () = KIND_CPU
    max_queue_size: int = 64  # requests waiting for a slot; past it spec_decoder refuses at once (overload)
    request_timeout_s: float = 600.0  # default per-request deadline (a request's timeout_s may shorten it)
    cancel_check_s: float = 0.02  # the front model asks Triton whether its clients cancelled this often
    watch_interval_s: float = 0.25  # the front model checks spec_decoder's stub processes and readiness this often
    extra: dict[str, str] = field(default_factory=dict)


def _io(items: Any, specs: Sequence[T.Tensor], output: bool = False) -> None:
    m = pb2()
    for s in specs:
        entry = items.add(name=s.name, data_type=m.DataType.Value(f"TYPE_{s.dtype}"), dims=list(s.dims))
        if s.optional and not output:
            entry.optional = True


def _python_model(
    name: str,
    impl: str,
    inputs,
    outputs,
    count: int,
    s: RepositorySettings,
    params: dict[str, str],
    gpus: Sequence[int] = (),
):
    """A Python-backend model: KIND_GPU with `count` instances on each of `gpus` when given, else KIND_CPU. The
    parameters hold no path: the bootstrap model.py finds the runtime beside itself (`triton_repo.runtime`)."""
    m = pb2()
    cfg = m.ModelConfig(name=name, backend="python", max_batch_size=0)
    _io(cfg.input, inputs)
    _io(cfg.output, outputs, output=True)
    if gpus:
        cfg.instance_group.add(kind=m.ModelInstanceGroup.KIND_GPU, count=count, gpus=list(gpus))
    else:
        cfg.instance_group.add(kind=m.ModelInstanceGroup.KIND_CPU, count=count)
    all_params = {"implementation": impl, **params, **s.extra}
    for k, v in all_params.items():
        cfg.parameters[k].string_value = v
    return cfg


def preprocessing_config(s: RepositorySettings):
    return _python_model(
        T.PREPROCESSING,
        "triton_repo.models.preprocessing",
        T.PREPROCESSING_INPUTS,
        T.PREPROCESSING_OUTPUTS,
        s.instances[0],
        s,
        {"tokenizer": "tokenizer.json"},
    )


def postprocessing_config(s: RepositorySettings):
    return _python_model(
        T.POSTPROCESSING,
        "triton_repo.models.postprocessing",
        T.POSTPROCESSING_INPUTS,
        T.POSTPROCESSING_OUTPUTS,
        s.instances[2],
        s,
        {"tokenizer": "tokenizer.json"},
    )


def spec_decoder_config(s: RepositorySettings):
    params = {
        "engine_dir": "engine",
        "max_input_len": str(s.max_input_len),
        "queue_delay_us": str(s.queue_delay_us),
        "draft_schedule": json.dumps([list(e) for e in s.draft_schedule]),
        "ort_threads": str(s.ort_threads),
        "decoupled": json.dumps(s.decoupled),
        "max_queue_size": str(s.max_queue_size),
        "request_timeout_s": repr(float(s.request_timeout_s)),
    }
    cfg = _python_model(
        T.SPEC_DECODER,
        "triton_repo.models.spec_decoder",
        T.SPEC_DECODER_INPUTS,
        T.SPEC_DECODER_OUTPUTS,
        s.instances[1],
        s,
        params,
        s.gpus,
    )
    cfg.model_transaction_policy.decoupled = s.decoupled
    return cfg


def front_config(s: RepositorySettings):
    """text in, text out: the model clients call; relays each request to spec_decoder over a local socket and forwards
    its client's cancellation (`triton_repo.models.front`). One instance serves any number of requests (a
    thread each); it is decoupled when spec_decoder is."""
    params = {
        "backend_model": T.SPEC_DECODER,
        "decoupled": json.dumps(s.decoupled),
        "cancel_check_s": repr(float(s.cancel_check_s)),
        "watch_interval_s": repr(float(s.watch_interval_s)),
        "restart_backend": "true",
    }
    cfg = _python_model(s.model_name, "triton_repo.models.front", T.CLIENT_INPUTS, T.CLIENT_OUTPUTS, 1, s, params)
    cfg.model_transaction_policy.decoupled = s.decoupled
    return cfg


def all_configs(s: RepositorySettings) -> dict[str, Any]:
    """Model name -> ModelConfig for the whole repository."""
    return {
        T.PREPROCESSING: preprocessing_config(s),
        T.SPEC_DECODER: spec_decoder_config(s),
        T.POSTPROCESSING: postprocessing_config(s),
        s.model_name: front_config(s),
    }


def render(cfg) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(cfg)


def parse(text: str):
    from google.protobuf import text_format

    return text_format.Parse(text, pb2().ModelConfig())


def parameters(cfg) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}
