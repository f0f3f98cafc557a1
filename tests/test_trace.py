"""Sizing from a trace (gpucap.planning.trace): reading traces, bad traces, routing, and the search."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpucap.cli.main import main
from gpucap.config import SLO, hardware
from gpucap.physics.coefficients import Coefficients
from gpucap.planning.trace import Trace, burstiness, read_trace, route, size_trace


def _csv(tmp_path, text: str):
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return p


def test_formats(tmp_path):
    csv = read_trace(_csv(tmp_path, "timestamp,prompt_tokens,completion_tokens\n10,100,20\n10.5,200,30\n"))
    assert csv.arrival_s.tolist() == [0.0, 0.5] and csv.input_len.tolist() == [100, 200]
    jl = tmp_path / "t.jsonl"
    jl.write_text(
        '{"arrival_s": 0, "input_len": 5, "output_len": 7}\n{"arrival_s": 2, "input_len": 6, "output_len": 8}\n'
    )
    assert read_trace(jl).output_len.tolist() == [7, 8] and read_trace(jl).mean_rate == 0.5
    detailed = tmp_path / "vllm.json"  # vllm bench serve --save-detailed: start times as sent (not sorted)
    detailed.write_text(json.dumps({"start_times": [5.0, 4.0], "input_lens": [10, 20], "output_lens": [1, 2]}))
    t = read_trace(detailed)
    assert t.arrival_s.tolist() == [0.0, 1.0] and t.input_len.tolist() == [20, 10]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("arrival_s,input_tokens,output_tokens\n1,10,10\n0.5,10,10\n", r"go back at request 2 \(0.5 s after 1 s\)"),
        ("arrival_s,input_tokens,output_tokens\n-1,10,10\n", "negative time"),
        ("arrival_s,input_tokens\n0,10\n", "no output token column; name it one of output_tokens"),
        ("arrival_s,input_tokens,output_tokens\n0,10,0\n", "request 1 has 0 output tokens"),
        ("arrival_s,input_tokens,output_tokens\n0,ten,5\n", "input_tokens on request 1 is 'ten'"),
        ("arrival_s,input_tokens,output_tokens\n", "no requests"),
    ],
)
def test_bad_traces_name_the_request_and_field(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        read_trace(_csv(tmp_path, text))


def test_routers_by_hand():
    t = Trace(np.array([0.0, 0.1, 0.2, 5.0]), np.full(4, 100.0), np.full(4, 10.0))
    assert route(t, 2, "round_robin").tolist() == [0, 1, 0, 1]
    # each request stays 1 s: at 0.2 both replicas hold one, the tie goes to the first; at 5 s none
    assert route(t, 2, "least_outstanding", np.full(4, 1.0)).tolist() == [0, 1, 0, 0]
    # evenly spaced arrivals have no spread in their gaps: the burstiness clips at 20
    assert burstiness(Trace(np.arange(10.0), np.ones(10), np.ones(10))) == 20.0


def test_the_search_finds_the_smallest_count():
    hw, coef = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB"), Coefficients.for_engine("vllm")
    rng = np.random.default_rng(3)
    n = 400
    t = Trace(np.sort(rng.uniform(0, 10.0, n)), np.full(n, 1500.0), np.full(n, 100.0))  # 40 requests/s
    res = size_trace(hw, coef, t, SLO(0.5, 0.05, "p95"), start=1)
    tried = res.tried.set_index("replicas")
    assert res.replicas is not None and res.replicas > 1 and tried.loc[res.replicas, "meets"]
    assert not tried.loc[res.replicas - 1, "meets"]  # one fewer misses: the smallest count


def test_cli_trace_refuses_a_second_target(tmp_path, capsys):
    p = _csv(tmp_path, "arrival_s,input_tokens,output_tokens\n0,10,10\n1,10,10\n")
    args = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--trace", str(p), "--target-rps", "3"]
    assert main(args) != 0
    assert "--trace gives the target" in capsys.readouterr().err
    assert main(["plan", "--model", "meta-llama/Llama-3.1-8B"]) != 0
    assert "or a --trace" in capsys.readouterr().err


def test_replay_gives_up_once_the_slo_is_lost():
    from gpucap.physics.memory import batch_slots
    from gpucap.queueing.simulate import kv_capacity_tokens, replay

    hw, coef = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB"), Coefficients.for_engine("vllm")
    n = 3000
    arrival = np.linspace(0, 10.0, n)  # 300 requests/s of 1,500-token prompts: far past one replica
    run = dict(
        input_len=np.full(n, 1500.0),
        output_len=np.full(n, 50.0),
        max_running=256,
        kv_capacity_tokens=kv_capacity_tokens(hw, 1550),
    )
    ttft, _ = replay(hw, coef, arrival_s=arrival, give_up=(0.5, 30), **run)
    assert np.isnan(ttft).all()  # more than 30 requests waited past 0.5 s: stopped early
    light = np.linspace(0, 10.0, 20)
    ttft, _ = replay(
        hw,
        coef,
        arrival_s=light,
        give_up=(0.5, 0),
        **{**run, "input_len": np.full(20, 1500.0), "output_len": np.full(20, 50.0)},
    )
    assert np.isfinite(ttft).all() and batch_slots(hw, context_tokens=1550) >= 1


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("nan.json", '{"start_times": [0, NaN], "input_lens": [5, 5], "output_lens": [5, 5]}', "arrival time nan"),
        ("inf.json", '{"start_times": [0, Infinity], "input_lens": [5, 5], "output_lens": [5, 5]}', "arrival time inf"),
        ("flat.json", '{"start_times": [[0, 1]], "input_lens": [[5, 5]], "output_lens": [[5, 5]]}', "flat lists"),
        ("cut.json", '{"start_times": [0, 1], "input_lens": [5', "the file is not complete JSON"),
        ("deep.json", '{"a": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
        ("list.jsonl", '{"arrival_s": 0, "input_len": 5, "output_len": 7}\n[1, 2, 3]\n', "line 2 is a JSON list"),
        (
            "cutline.jsonl",
            '{"arrival_s": 0, "input_len": 5, "output_len": 7}\n{"arrival_s": 1, "inp\n',
            "line 2 is not",
        ),
    ],
)
def test_damaged_traces_name_the_file(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        read_trace(path)
    assert str(path) in str(err.value)


def test_a_trace_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"arrival_s": 0, "input_len": 5, "output_len": 7}\n')
    assert read_trace(path).input_len.tolist() == [5]


def test_cli_trace_at_one_instant_or_of_one_token_outputs(tmp_path, capsys):
    """All requests at one time (or just one) is not a rate to size from: one line saying so. A
    trace of one-token outputs has no TPOT: only the TTFT SLO decides (it no longer counts as a miss
    all the way to the search's end)."""
    once = _csv(tmp_path, "arrival_s,input_tokens,output_tokens\n3,10,10\n3,10,10\n")
    base = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpus", "H100-SXM-80GB"]
    assert main([*base, "--trace", str(once)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "all arrive at 0 s" in err and "--target-concurrency" in err
    one_token = tmp_path / "one.csv"
    rows = "\n".join(f"{k * 0.05:.2f},500,1" for k in range(200))
    one_token.write_text("arrival_s,input_tokens,output_tokens\n" + rows + "\n")
    hw, coef = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB"), Coefficients.for_engine("vllm")
    res = size_trace(hw, coef, read_trace(one_token), SLO(2.0, 0.05, "p99"), start=1)
    assert res.replicas == 1 and np.isnan(res.tried.iloc[0]["tpot_s"])  # 20 short prompts/s: one replica


def test_the_search_reports_each_count_as_it_goes():
    hw, coef = hardware("meta-llama/Llama-3.1-8B", "H100-SXM-80GB"), Coefficients.for_engine("vllm")
    rng = np.random.default_rng(3)
    n = 400
    t = Trace(np.sort(rng.uniform(0, 10.0, n)), np.full(n, 1500.0), np.full(n, 100.0))
    seen: list[tuple[int, float]] = []
    res = size_trace(
        hw, coef, t, SLO(0.5, 0.05, "p95"), start=1, progress=lambda row, s: seen.append((row["replicas"], s))
    )
    assert sorted(k for k, _ in seen) == res.tried["replicas"].tolist()  # each count tried, reported once
    assert all(s >= 0 for _, s in seen) and [s for _, s in seen] == sorted(s for _, s in seen)


def test_pieces_with_a_warm_up_replay_what_the_whole_replay_does(monkeypatch):
    """A share replayed in 60-second pieces, each after 30 s of the traffic before it, against
    the share replayed whole: the same verdicts, the SLO statistics within 2%; with no warm-up
    the pieces start from an empty engine and the tail comes out lower."""
    import gpucap.planning.trace as trace_module
    from gpucap.planning.trace import _pieces

    hw, coef = hardware("meta-llama/Llama-3.1-8B", "L40S-48GB"), Coefficients.for_engine("vllm")
    rng = np.random.default_rng(11)
    n = 2400
    t = Trace(np.cumsum(rng.exponential(1 / 8.0, n)), rng.integers(200, 2500, n).astype(float),
              rng.integers(20, 400, n).astype(float))  # fmt: skip
    # the pieces cover the share once, in order, each with the requests of the 30 s before it
    pieces = _pieces(t, np.arange(n), 60.0, 30.0)
    assert np.array_equal(np.concatenate([p.own for p in pieces]), np.arange(n)) and len(pieces) == 5
    second = pieces[1]
    warm = second.requests.arrival_s.size - second.own.size
    assert warm > 0 and second.requests.arrival_s[0] >= t.arrival_s[second.own[0]] - 30.0
    assert second.requests.arrival_s[warm - 1] < t.arrival_s[second.own[0]]
    slo = SLO(ttft_s=1.0, tpot_s=0.06, statistic="p90")
    whole = size_trace(hw, coef, t, slo, start=2, max_replicas=2, chunk_s=None, n_jobs=1).tried
    monkeypatch.setattr(trace_module, "WARMUP_S", 30.0)
    cut = size_trace(hw, coef, t, slo, start=2, max_replicas=2, chunk_s=60.0, n_jobs=1).tried
    assert whole["meets"].tolist() == cut["meets"].tolist()
    for col in ("ttft_s", "tpot_s"):
        assert np.allclose(cut[col], whole[col], rtol=0.02), (col, cut[col].tolist(), whole[col].tolist())
    monkeypatch.setattr(trace_module, "WARMUP_S", 0.0)  # each piece from an empty engine
    cold = size_trace(hw, coef, t, slo, start=2, max_replicas=2, chunk_s=60.0, n_jobs=1).tried
    assert (cold["tpot_s"] < 0.97 * whole["tpot_s"]).all() and (cold["ttft_s"] < 0.98 * whole["ttft_s"]).all()
    with pytest.raises(ValueError, match="chunk_s must be a positive number of seconds"):
        size_trace(hw, coef, t, slo, chunk_s=0.0)
