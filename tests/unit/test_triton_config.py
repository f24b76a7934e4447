"""config.pbtxt rendering: every config parses back (text_format) with each tensor's dtype, dims and
optional flag from the one table (triton_repo.tensors), and the front model can forward every client
tensor to spec_decoder and get back every client output."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tritonclient.grpc", reason="the serve extra (tritonclient[grpc]) renders configs")

from triton_repo import tensors as T  # noqa: E402
from triton_repo.config import RepositorySettings, all_configs, parameters, parse, pb2, render  # noqa: E402

SETTINGS = RepositorySettings(
    model_name="tiny",
    instances=(2, 1, 3),
    decoupled=True,
    queue_delay_us=250,
    draft_schedule=((1, 64), (4, 16), (8, 1)),
    max_input_len=512,
    max_queue_size=7,
    request_timeout_s=12.5,
)


@pytest.fixture(scope="module")
def parsed():
    return {name: parse(render(cfg)) for name, cfg in all_configs(SETTINGS).items()}


def _dtype(t: T.Tensor) -> int:
    return pb2().DataType.Value(f"TYPE_{t.dtype}")


def _check(items, table: tuple[T.Tensor, ...], inputs: bool) -> None:
    assert [i.name for i in items] == [t.name for t in table]
    for item, t in zip(items, table):
        assert item.data_type == _dtype(t) and list(item.dims) == list(t.dims), t.name
        if inputs:
            assert item.optional == t.optional, t.name


@pytest.mark.parametrize(
    "name,inputs,outputs",
    [
        ("tiny", T.CLIENT_INPUTS, T.CLIENT_OUTPUTS),
        ("preprocessing", T.PREPROCESSING_INPUTS, T.PREPROCESSING_OUTPUTS),
        ("spec_decoder", T.SPEC_DECODER_INPUTS, T.SPEC_DECODER_OUTPUTS),
        ("postprocessing", T.POSTPROCESSING_INPUTS, T.POSTPROCESSING_OUTPUTS),
    ],
)
def test_every_tensor_round_trips(parsed, name, inputs, outputs):
    cfg = parsed[name]
    assert cfg.name == name and cfg.max_batch_size == 0
    _check(cfg.input, inputs, True)
    _check(cfg.output, outputs, False)
    assert parse(render(cfg)) == cfg


def test_client_tensors(parsed):
    ens = {i.name: i for i in parsed["tiny"].input}
    assert not ens["text_input"].optional and not ens["max_tokens"].optional
    assert {n for n, i in ens.items() if i.optional} == {
        "temperature",
        "top_p",
        "seed",
        "stream",
        "stop",
        "speculate",
        "lookahead_window",
        "lookahead_ngram",
        "lookahead_verification_set",
    }
    m = pb2()
    assert ens["text_input"].data_type == m.TYPE_STRING and ens["stop"].dims == [-1]
    outs = {o.name: o.data_type for o in parsed["tiny"].output}
    assert outs == {
        "text_output": m.TYPE_STRING,
        "output_tokens": m.TYPE_INT32,
        "steps": m.TYPE_INT32,
        "accepted_tokens": m.TYPE_INT32,
        "drafted_tokens": m.TYPE_INT32,
        "finish_reason": m.TYPE_STRING,
    }


def test_python_models(parsed):
    m = pb2()
    for name, count, impl in (
        ("preprocessing", 2, "preprocessing"),
        ("spec_decoder", 1, "spec_decoder"),
        ("postprocessing", 3, "postprocessing"),
        ("tiny", 1, "front"),
    ):
        cfg = parsed[name]
        assert cfg.backend == "python"
        assert [(g.kind, g.count) for g in cfg.instance_group] == [(m.ModelInstanceGroup.KIND_CPU, count)]
        p = parameters(cfg)
        assert p["implementation"] == f"triton_repo.models.{impl}"
        assert not {"python_paths", "python_version"} & set(p)  # the repository carries its code (relocatable)
    spec = parsed["spec_decoder"]
    assert spec.model_transaction_policy.decoupled
    p = parameters(spec)
    assert json.loads(p["draft_schedule"]) == [[1, 64], [4, 16], [8, 1]] and p["max_input_len"] == "512"
    assert p["queue_delay_us"] == "250" and p["engine_dir"] == "engine"
    assert p["max_queue_size"] == "7" and float(p["request_timeout_s"]) == 12.5
    sync = all_configs(RepositorySettings(decoupled=False))
    assert not parse(render(sync["spec_decoder"])).model_transaction_policy.decoupled
    assert not parse(render(sync["trtspec"])).model_transaction_policy.decoupled


def test_front_model_can_relay_every_tensor(parsed):
    """The front forwards each client input to spec_decoder under the same name (same dtype and dims) and
    answers with outputs spec_decoder has too; it is decoupled exactly when spec_decoder is."""
    front, spec = parsed["tiny"], parsed["spec_decoder"]
    spec_in = {i.name: (i.data_type, list(i.dims)) for i in spec.input}
    spec_out = {o.name: (o.data_type, list(o.dims)) for o in spec.output}
    for i in front.input:
        assert spec_in[i.name] == (i.data_type, list(i.dims)), i.name
    for o in front.output:
        assert spec_out[o.name] == (o.data_type, list(o.dims)), o.name
    assert front.model_transaction_policy.decoupled == spec.model_transaction_policy.decoupled
    p = parameters(front)
    assert p["backend_model"] == "spec_decoder" and p["restart_backend"] == "true"
    assert float(p["cancel_check_s"]) > 0 and float(p["watch_interval_s"]) > 0


def test_rendering_is_protobuf_text_not_a_template(parsed):
    text = render(all_configs(SETTINGS)["spec_decoder"])
    assert "${" not in text and "{{" not in text
    with pytest.raises(Exception):
        parse(text + "\nno_such_field: 1\n")


def test_spec_decoder_on_gpus_the_others_on_the_cpu():
    """A TensorRT engine's repository: spec_decoder KIND_GPU with `count` instances on each listed GPU (Triton's
    model_config.proto: `gpus` lists the devices, `count` is per device); the front model, preprocessing and
    postprocessing KIND_CPU. No config names a path."""
    from triton_repo.runtime import absolute_paths

    m = pb2()
    s = RepositorySettings(model_name="tiny", instances=(1, 2, 1), gpus=(0, 1))
    cfgs = {name: parse(render(cfg)) for name, cfg in all_configs(s).items()}
    assert [(g.kind, g.count, list(g.gpus)) for g in cfgs["spec_decoder"].instance_group] == [
        (m.ModelInstanceGroup.KIND_GPU, 2, [0, 1])
    ]
    for name in ("tiny", "preprocessing", "postprocessing"):
        assert [(g.kind, list(g.gpus)) for g in cfgs[name].instance_group] == [(m.ModelInstanceGroup.KIND_CPU, [])]
    assert "KIND_GPU" in render(all_configs(s)["spec_decoder"]) and "gpus: 1" in render(all_configs(s)["spec_decoder"])
    assert absolute_paths(render(c) for c in all_configs(s).values()) == []
