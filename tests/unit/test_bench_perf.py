"""perf_analyzer results and `trtspec bench`'s pure parts: CSV and profile-export parsing (fixtures trimmed
from a real perf_analyzer 2.51 run against the tiny EAGLE-2 ensemble, concurrency 1, output_len 16),
per-request metrics worked by hand from the fixture's timestamps, the command line, the ignore_eos
request parameter, prompts cut to length with the fixture tokenizer, and the report's ratios."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from builder.bench.serve_metrics import records, summarize, tau
from builder.serve.perf import input_data, perf_command, read_perf_csv, read_profile_export

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "perf_analyzer"
CSV = FIX / "ensemble_streaming_c1.csv"
EXPORT = FIX / "ensemble_streaming_c1.export.json"
TOKENIZER = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-llama3" / "base" / "tokenizer.json"


def test_read_perf_csv_real_run():
    rows = read_perf_csv(CSV)
    assert len(rows) == 1
    r = rows[0]
    assert r["Concurrency"] == 1 and r["Inferences/Second"] == pytest.approx(48.2633)
    assert r["Response Throughput"] == pytest.approx(287.361)
    assert (r["p50 latency"], r["p99 latency"], r["Avg latency"]) == (20120, 28912, 20517)
    assert "request/response" in r  # --verbose-csv columns


def test_read_perf_csv_stops_at_the_first_blank_line_and_keeps_empty_cells(tmp_path):
    text = CSV.read_text().rstrip("\n") + ",\n"  # a trailing empty cell, as with --collect-metrics on a CPU host
    header, row = text.splitlines()
    p = tmp_path / "pa.csv"
    p.write_text(f"{header},Avg GPU Utilization\n{row}\n\nServer Metrics\nwhatever,1\n")
    (r,) = read_perf_csv(p)
    assert r["Avg GPU Utilization"] is None and r["Concurrency"] == 1


@pytest.mark.parametrize(
    "text,why",
    [
        ("", "empty"),
        ("Foo,Bar\n1,2\n", "not a perf_analyzer CSV"),
        ("Concurrency,x\n1\n", "cells"),
        ("Concurrency,x\nabc,1\n", "not a number"),
    ],
)
def test_read_perf_csv_refuses_other_files(tmp_path, text, why):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=why):
        read_perf_csv(p)


def test_profile_export_records_and_metrics_by_hand(tmp_path):
    exp = read_profile_export(EXPORT)["experiments"][0]
    recs = records(exp)
    assert [r.output_tokens for r in recs] == [16, 16, 16]
    assert [(r.steps, r.accepted, r.first_tokens) for r in recs] == [(4, 14, 1), (5, 12, 1), (5, 11, 1)]
    r0 = recs[0]  # sent 1796123868850348655, first response …854323384, last …865307056 (ns)
    assert r0.latency_ms == pytest.approx(14.958401)
    assert r0.ttft_ms == pytest.approx(3.974729)
    assert r0.itl_ms == pytest.approx(10.983672 / 15)
    assert tau(recs) == pytest.approx((14 + 12 + 11 + 14) / 14)
    s = summarize(recs, 16, exp["window_boundaries"])
    lat = [
        14.958401,
        (1796123868883413514 - 1796123868865389759) / 1e6,
        (1796123868902312541 - 1796123868883506502) / 1e6,
    ]
    assert s["latency_p50_ms"] == pytest.approx(float(np.median(lat)))
    assert s["latency_p99_ms"] == pytest.approx(float(np.percentile(lat, 99)))
    assert s["token_counts_ok"] and s["wrong_token_counts"] == [] and s["measured_requests"] == 3
    assert s["responses_per_request"] == pytest.approx(17 / 3)
    assert summarize(recs, 17)["wrong_token_counts"] == [16] and not summarize(recs, 17)["token_counts_ok"]
    gz = tmp_path / "e.json.gz"  # the bench keeps exports gzipped
    gz.write_bytes(gzip.compress(EXPORT.read_bytes()))
    assert read_profile_export(gz) == read_profile_export(EXPORT)


def test_plain_decoding_has_tau_one_and_requests_without_counters_are_skipped():
    exp = {
        "requests": [
            {
                "timestamp": 0,
                "response_timestamps": [1_000_000 * (i + 1) for i in range(4)],
                "response_outputs": [{"output_tokens": i + 1, "steps": i, "accepted_tokens": 0} for i in range(4)],
            },
            {"timestamp": 5, "response_timestamps": [], "response_outputs": []},
        ]
    }
    (r,) = records(exp)
    assert tau([r]) == 1.0 and r.itl_ms == pytest.approx(1.0) and r.ttft_ms == pytest.approx(1.0)
    assert tau([]) is None


def test_profile_export_shape_is_checked(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"experiments": [{"requests": []}]}))
    with pytest.raises(ValueError, match="experiment"):
        read_profile_export(p)
    p.write_text("[]")
    with pytest.raises(ValueError, match="not a perf_analyzer profile export"):
        read_profile_export(p)


def test_perf_command_streams_with_parameters_and_exports(tmp_path):
    cmd = perf_command(
        "m",
        "127.0.0.1:1",
        tmp_path / "d.json",
        4,
        measurement_ms=1500,
        stability_percentage=1000,
        max_trials=3,
        csv=tmp_path / "a.csv",
        binary=Path("/bin/pa"),
        profile_export=tmp_path / "e.json",
        request_parameters={"ignore_eos": True, "n": 3},
    )
    assert cmd[:2] == ["/bin/pa", "-m"] and {"--streaming", "--async", "--verbose-csv"} <= set(cmd)
    assert (
        cmd[cmd.index("-i") + 1] == "grpc" and "--concurrency-range=4" in cmd and "--measurement-interval=1500" in cmd
    )
    assert cmd[cmd.index("--profile-export-file") + 1] == str(tmp_path / "e.json")
    params = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--request-parameter"]
    assert params == ["ignore_eos:true:bool", "n:3:int"]


def test_input_data_sets_speculate_only_when_asked():
    on = input_data(["a", "b"], 8, speculate=False)["data"]
    assert on == [
        {"text_input": ["a"], "max_tokens": [8], "stream": [True], "speculate": [False]},
        {"text_input": ["b"], "max_tokens": [8], "stream": [True], "speculate": [False]},
    ]
    assert "speculate" not in input_data(["a"], 8)["data"][0]


def test_ignore_eos_request_parameter_drops_the_stop_ids():
    from triton_repo.request import Limits, RequestError, parse

    limits = Limits(vocab=100, max_input_len=16, max_seq_len=64, stop_ids=(1,), sampling=False, lookahead=None)
    fields = {"input_ids": np.array([5, 6], np.int32), "max_tokens": np.array([4], np.int32)}
    encode = lambda s, special: [7]  # noqa: E731
    assert parse(fields, limits, encode).request.stop_ids == (1,)
    assert parse(fields, limits, encode, {}).request.stop_ids == (1,)
    assert parse(fields, limits, encode, {"ignore_eos": False}).request.stop_ids == (1,)
    got = parse({**fields, "stop": np.array([b"x"], object)}, limits, encode, {"ignore_eos": True}).request
    assert got.stop_ids == () and got.stop_sequences  # stop words still apply
    for bad in ("true", 1, None):
        with pytest.raises(RequestError, match="ignore_eos: expected a bool"):
            parse(fields, limits, encode, {"ignore_eos": bad})


def test_prompts_are_cut_to_about_input_len_tokens():
    from tokenizers import Tokenizer

    from builder.bench.serve_bench import make_prompts, source_texts

    tok = Tokenizer.from_file(str(TOKENIZER))
    texts = source_texts("builtin:humaneval", Path("."))
    for n in (8, 64, 200):
        p = make_prompts(tok, texts, n, 5)
        assert len(p.texts) == 5 and len(set(p.texts)) == 5
        assert p.tokens == [len(tok.encode(t, add_special_tokens=True).ids) for t in p.texts]
        assert all(n - 3 <= k <= n for k in p.tokens), (n, p.tokens)


def test_jsonl_prompt_source(tmp_path):
    from builder.bench.serve_bench import source_texts
    from builder.bench.serve_settings import BenchError

    (tmp_path / "p.jsonl").write_text('{"text": "def f():"}\n\n{"text": "x = 1"}\n')
    assert source_texts("p.jsonl", tmp_path) == ["def f():", "x = 1"]
    (tmp_path / "bad.jsonl").write_text('{"prompt": "x"}\n')
    with pytest.raises(BenchError, match="bad.jsonl:1"):
        source_texts("bad.jsonl", tmp_path)
    with pytest.raises(BenchError, match="no such file"):
        source_texts("missing.jsonl", tmp_path)


def _level(c, mode, tps, p50=10.0):
    return {
        "concurrency": c,
        "mode": mode,
        "output_tokens_per_s": tps,
        "requests_per_s": tps / 16,
        "latency_p50_ms": p50,
        "latency_p99_ms": 2 * p50,
        "ttft_p50_ms": 1.0,
        "ttft_mean_ms": 1.0,
        "itl_mean_ms": 0.5,
        "tau": 3.0 if mode == "speculative" else 1.0,
        "measured_requests": 10,
        "token_counts_ok": True,
        "wrong_token_counts": [],
        "failed_requests": 0,
        "errors": 0,
        "pa_latency_p50_ms": p50,
        "export_requests_per_s": tps / 16,
        "responses_per_request": 4.0,
        "csv": f"raw/{mode}_c{c}.csv",
    }


def test_comparison_and_report_ratios(tmp_path):
    from builder.bench.serve_report import comparison, table_lines, write_outputs

    results = {
        "model": "m",
        "settings": {
            "concurrency": [1, 4],
            "window_ms": 1000,
            "stability_percentage": 1000.0,
            "max_trials": 3,
            "output_len": 16,
            "input_len": 32,
            "prompt_source": "builtin:humaneval",
        },
        "prompts": {"count": 2, "tokens_min": 31, "tokens_max": 32},
        "machine": {"loadavg": [0.1, 0.2, 0.3]},
        "versions": {"tritonserver": "2.51.0"},
        "probes": {"speculative": {"tau": 3.0, "token_counts_ok": True}},
        "levels": [
            _level(1, "speculative", 300.0, 5.0),
            _level(1, "baseline", 100.0),
            _level(4, "baseline", 400.0),
            _level(4, "speculative", 200.0),
        ],
    }
    rows = comparison(results)
    assert [r["throughput_ratio"] for r in rows] == [3.0, 0.5]
    assert rows[0]["latency_p50_ratio"] == 0.5
    assert "**3.00×**" in table_lines(results)[2] and "**0.50×**" in table_lines(results)[3]
    write_outputs(tmp_path, results, "t")
    for f in (
        "bench.json",
        "bench.csv",
        "report.md",
        "throughput.png",
        "latency.png",
        "ttft.png",
        "itl.png",
        "tau.png",
    ):
        assert (tmp_path / f).stat().st_size > 0, f
    assert (tmp_path / "throughput.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "bench.json").read_text())["comparison"][1]["throughput_ratio"] == 0.5
    assert len((tmp_path / "bench.csv").read_text().splitlines()) == 5


def test_cli_levels_and_targets(tmp_path):
    from click.testing import CliRunner

    from builder.cli import cli

    res = CliRunner().invoke(cli, ["bench", str(tmp_path), "--concurrency", "1,x"])
    assert res.exit_code == 2 and "--concurrency" in res.output
    res = CliRunner().invoke(cli, ["bench", str(tmp_path), "--concurrency", "2,2"])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["bench", str(tmp_path)])
    assert res.exit_code == 2 and "not a trtspec model repository" in res.output
    assert CliRunner().invoke(cli, ["bench", "--help"]).exit_code == 0


def test_genai_perf_json_and_command():
    from builder.bench.serve_genai import genai_command, parse_genai_json

    g = parse_genai_json(FIX / "genai_perf_generate_c1.json")  # genai-perf 0.0.16, baseline, concurrency 1
    assert g["output_token_throughput"] == pytest.approx(909.9277670696234)
    assert g["request_throughput"] == pytest.approx(57.34020190160368)
    assert (g["request_latency_p50_ms"], g["ttft_p50_ms"]) == pytest.approx((16.6747875, 3.245874))
    assert g["itl_mean_ms"] == pytest.approx(0.9375336310679612) and g["request_count"] == 206
    cmd = genai_command(
        Path("/bin/genai-perf"), "m", "127.0.0.1:9", Path("p.jsonl"), Path("tok"), 2, 16, False, 900, Path("art")
    )
    assert cmd[1] == "profile" and cmd[cmd.index("--endpoint-type") + 1] == "generate"
    assert cmd[cmd.index("--endpoint") + 1] == "v2/models/m/generate_stream" and "--streaming" in cmd
    extra = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--extra-inputs"]
    assert extra == ["ignore_eos:true", "speculate:false"]


def test_repeated_runs_combine_over_all_requests():
    from builder.bench.perf_analyzer import combine

    exp = read_profile_export(EXPORT)["experiments"][0]
    recs = records(exp)
    a = {**_level(1, "speculative", 300.0), "responses_per_s": 10.0, "pa_latency_p99_ms": 1.0, "export": "a.gz"}
    b = {
        **_level(1, "speculative", 100.0),
        "responses_per_s": 20.0,
        "pa_latency_p99_ms": 3.0,
        "export": "b.gz",
        "failed_requests": 2,
    }
    assert combine([(a, recs)], 16) is a
    got = combine([(a, recs[:1]), (b, recs[1:])], 16)
    assert got["output_tokens_per_s"] == 200.0 and got["responses_per_s"] == 15.0 and got["failed_requests"] == 2
    assert got["errors"] == 2 and [r["output_tokens_per_s"] for r in got["runs"]] == [300.0, 100.0]
    whole = summarize(recs, 16)
    assert got["tau"] == pytest.approx(whole["tau"]) and got["latency_p50_ms"] == pytest.approx(whole["latency_p50_ms"])
    assert got["measured_requests"] == 3


def test_server_delta_and_its_report_lines_by_hand():
    """Two scrapes of Triton's metrics port (spec_decoder's families, two instances' series summed) → what the
    server did between them, by hand: τ = (accepted + sequence steps) / sequence steps, etc."""
    from builder.bench.serve_metrics import parse_prometheus, server_delta
    from builder.bench.serve_report import server_lines

    def text(received, seq_steps, steps, accepted, out, step_sum, step_count, deadline):
        lines = []
        for inst, share in (("a", 0.5), ("b", 0.5)):
            lab = f'instance="{inst}",model="spec_decoder",pid="1"'
            lines += [
                f"trtspec_requests_received_total{{{lab}}} {received * share}",
                f"trtspec_sequence_steps_total{{{lab}}} {seq_steps * share}",
                f"trtspec_steps_total{{{lab}}} {steps * share}",
                f"trtspec_accepted_tokens_total{{{lab}}} {accepted * share}",
                f"trtspec_draft_tokens_total{{{lab}}} 0",
                f"trtspec_output_tokens_total{{{lab}}} {out * share}",
                f"trtspec_step_seconds_sum{{{lab}}} {step_sum * share}",
                f"trtspec_step_seconds_count{{{lab}}} {step_count * share}",
                f"trtspec_tau_sum{{{lab}}} 0",
                f"trtspec_tau_count{{{lab}}} 0",
                f'trtspec_request_errors_total{{{lab},kind="deadline"}} {deadline * share}',
                f'trtspec_requests_ended_total{{{lab},outcome="length"}} {received * share}',
                f"trtspec_requests_queued{{{lab}}} 0",
                f"trtspec_requests_active{{{lab}}} 0",
            ]
        return "\n".join(lines) + "\n"

    before = parse_prometheus(text(10, 100, 40, 150, 260, 0.2, 40, 1))
    after = parse_prometheus(text(30, 400, 140, 750, 1180, 0.7, 140, 3))
    d = server_delta(before, after)
    assert d["requests"] == 20 and d["steps"] == 100 and d["sequence_steps"] == 300 and d["output_tokens"] == 920
    assert d["tau"] == pytest.approx((600 + 300) / 300) and d["mean_batch"] == pytest.approx(3.0)
    assert (
        d["step_ms_mean"] == pytest.approx(5.0) and d["errors"] == {"deadline": 2.0} and d["ended"] == {"length": 20.0}
    )
    row = server_lines({"levels": [{"concurrency": 2, "mode": "speculative", "tau": 2.9, "server": d}]})[-1]
    assert row == "| 2 | speculative | 20 | 920 | 100 | 3.00 | 5.00 | 3.00 | 2.90 | deadline 2 |"
