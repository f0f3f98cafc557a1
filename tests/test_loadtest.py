"""benchmarks/loadtest.py against a fake ``vllm`` executable: the command line, the stop rule,
no overwriting, and a run folder that gpucap.calibration.results reads with the hardware metadata applied.

The fake parses the ``vllm bench serve`` flags the harness uses and writes a result JSON with
vLLM's field names (vllm/benchmarks/serve.py). Its latencies grow with the concurrency C:
TTFT = 100 ms x C and TPOT = 10 ms x C (median = mean), every request completes, and the run
lasts num_prompts / C x (TTFT + (output_len - 1) x TPOT).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import shlex
import sys
from pathlib import Path

import pytest

from gpucap.calibration.results import read_results

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("loadtest", ROOT / "benchmarks" / "loadtest.py")
assert spec and spec.loader
loadtest = importlib.util.module_from_spec(spec)
sys.modules["loadtest"] = loadtest
spec.loader.exec_module(loadtest)

FAKE_VLLM = r"""
import argparse, json, os, sys
from pathlib import Path
with open(os.environ["FAKE_VLLM_CALLS"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
if os.environ.get("FAKE_VLLM_FAIL"):
    print("Connection refused")
    sys.exit(1)
if os.environ.get("FAKE_VLLM_HANG"):  # a benchmark that hangs, with a child of its own
    import subprocess, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(os.environ["FAKE_VLLM_HANG"] + ".self").write_text(str(os.getpid()))
    # written whole, then renamed: the test waits for the name and must never read it half written
    Path(os.environ["FAKE_VLLM_HANG"] + ".tmp").write_text(str(child.pid))
    os.replace(os.environ["FAKE_VLLM_HANG"] + ".tmp", os.environ["FAKE_VLLM_HANG"])
    time.sleep(120)
p = argparse.ArgumentParser()
p.add_argument("cmd", nargs=2)
for flag in ("--backend", "--base-url", "--endpoint", "--model", "--tokenizer", "--dataset-name",
             "--random-input-len", "--random-output-len", "--random-range-ratio", "--num-prompts", "--seed",
             "--max-concurrency", "--request-rate", "--percentile-metrics", "--metric-percentiles",
             "--result-dir", "--result-filename", "--num-warmups"):
    p.add_argument(flag)
for flag in ("--ignore-eos", "--disable-tqdm", "--save-result"):
    p.add_argument(flag, action="store_true")
p.add_argument("--metadata", nargs="*", default=[])
a = p.parse_args()
assert a.cmd == ["bench", "serve"] and a.save_result and a.ignore_eos
n, isl, osl = int(a.num_prompts), int(a.random_input_len), int(a.random_output_len)
c = int(a.max_concurrency) if a.max_concurrency else 1
ttft_ms, tpot_ms = 100.0 * c, 10.0 * c
e2el_ms = ttft_ms + (osl - 1) * tpot_ms
duration = n / c * e2el_ms / 1e3
r = {"date": "20261129-120000", "backend": a.backend, "model_id": a.model, "tokenizer_id": a.tokenizer,
     "num_prompts": n}
r.update(kv.split("=", 1) for kv in a.metadata)
rate = "inf" if a.request_rate == "inf" else float(a.request_rate)
dead = bool(os.environ.get("FAKE_VLLM_DEAD"))  # a server that is not listening: vLLM still exits 0
if dead:
    ttft_ms = tpot_ms = e2el_ms = 0.0
half = bool(os.environ.get("FAKE_VLLM_HALF"))  # half the requests fail
r.update({"request_rate": rate, "burstiness": 1.0, "max_concurrency": int(a.max_concurrency) if a.max_concurrency else None,
          "duration": duration, "completed": 0 if dead else n - n // 2 if half else n,
          "failed": n if dead else n // 2 if half else 0, "total_input_tokens": n * isl,
          "total_output_tokens": n * osl, "request_throughput": (n - n // 2 if half else n) / duration, "request_goodput": None,
          "output_throughput": n * osl / duration, "total_token_throughput": n * (isl + osl) / duration})
for m, v in (("ttft", ttft_ms), ("tpot", tpot_ms), ("itl", tpot_ms), ("e2el", e2el_ms)):
    r.update({f"mean_{m}_ms": v, f"median_{m}_ms": v, f"std_{m}_ms": 0.0, f"p90_{m}_ms": v, f"p99_{m}_ms": v})
out = Path(a.result_dir) / a.result_filename
out.write_text(json.dumps(r))
out.with_suffix(".pytorch.json").write_text("[]")
print("============ Serving Benchmark Result ============")
"""


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\n{FAKE_VLLM}")
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_VLLM_CALLS", str(tmp_path / "calls.jsonl"))
    return exe


def calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def argv(exe: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--base-url", "http://127.0.0.1:8000", "--model", "tiny", "--tokenizer", "/models/tiny",
        "--vllm", str(exe), "--gpu", "H100-SXM-80GB", "--tp", "2", "--gpucap-model", "meta-llama/Llama-3.1-8B",
        "--input-len", "128", "--output-len", "32", "--out", str(out), "--probe-timeout", "0", *extra,
    ]  # fmt: skip


def test_command_line_per_level(fake_vllm: Path, tmp_path: Path) -> None:
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "4,1", "--num-prompts", "10")) == 0
    runs = calls(tmp_path)
    assert len(runs) == 2
    first, second = (dict(zip(c[2::1], c[3::1], strict=False)) for c in runs)
    # increasing load: 1 before 4, whatever the order given
    assert first["--max-concurrency"] == "1" and second["--max-concurrency"] == "4"
    # prompts: max(10, 4 per slot x C) -> 10 at C=1, max(10, 16) = 16 at C=4
    assert first["--num-prompts"] == "10" and second["--num-prompts"] == "16"
    # each level its own prompts: seed 0 + level number
    assert first["--seed"] == "0" and second["--seed"] == "1"
    cmd = runs[1]
    assert cmd[:2] == ["bench", "serve"]
    for flag, value in (("--dataset-name", "random"), ("--random-input-len", "128"), ("--random-output-len", "32"),
                        ("--random-range-ratio", "0"), ("--request-rate", "inf"), ("--model", "tiny"),
                        ("--tokenizer", "/models/tiny"), ("--result-filename", "concurrency-0004.json")):  # fmt: skip
        assert cmd[cmd.index(flag) + 1] == value, flag
    assert "--ignore-eos" in cmd and "--save-result" in cmd
    assert "--num-warmups" not in cmd  # vLLM's default (none) unless asked
    meta = cmd[cmd.index("--metadata") + 1 :]
    # num_gpus defaults to tp x pp = 2 x 1
    assert meta == ["gpu=H100-SXM-80GB", "num_gpus=2", "tp=2", "pp=1", "engine=vllm", "model=meta-llama/Llama-3.1-8B"]


def test_request_rate_levels(fake_vllm: Path, tmp_path: Path) -> None:
    extra = ("--request-rate", "4,0.5", "--rate-seconds", "30", "--num-prompts", "20", "--num-warmups", "2")
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", *extra)) == 0
    rates = [c[c.index("--request-rate") + 1] for c in calls(tmp_path)]
    prompts = [c[c.index("--num-prompts") + 1] for c in calls(tmp_path)]
    assert rates == ["0.5", "4"]
    assert all(c[c.index("--num-warmups") + 1] == "2" for c in calls(tmp_path))
    # max(20, ceil(0.5 x 30) = 15) = 20; max(20, ceil(4 x 30) = 120) = 120
    assert prompts == ["20", "120"]
    assert all("--max-concurrency" not in c for c in calls(tmp_path))


def test_stops_past_the_slo(fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # TTFT = 0.1 s x C against 2 x 0.5 s = 1 s: C=1 (0.1 s), 4 (0.4 s) go on, 16 (1.6 s) stops,
    # 64 never runs. TPOT = 0.01 s x C stays under 2 x 1 s throughout.
    extra = ("--concurrency", "1,4,16,64", "--ttft-slo", "0.5", "--tpot-slo", "1", "--stop-factor", "2")
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", *extra)) == 0
    assert [c[c.index("--max-concurrency") + 1] for c in calls(tmp_path)] == ["1", "4", "16"]
    out = capsys.readouterr().out
    assert "stopping the concurrency sweep after concurrency 16: median TTFT 1.6 s > 2 x SLO 0.5 s" in out
    run_dir = next((tmp_path / "out").iterdir())
    assert "# loadtest: stopping" in (run_dir / "commands.log").read_text()


def test_stops_on_tpot_with_the_mean(fake_vllm: Path, tmp_path: Path) -> None:
    # TPOT = 0.01 s x C against 3 x 0.01 s = 0.03 s: C=2 (0.02 s) goes on, C=4 (0.04 s) stops.
    extra = ("--concurrency", "1,2,4,8", "--tpot-slo", "0.01", "--stat", "mean")
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", *extra)) == 0
    assert [c[c.index("--max-concurrency") + 1] for c in calls(tmp_path)] == ["1", "2", "4"]


def test_folder_reads_into_gpucap_with_metadata(fake_vllm: Path, tmp_path: Path) -> None:
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "1,4", "--num-prompts", "8")) == 0
    (run_dir,) = (tmp_path / "out").iterdir()
    rs = read_results(run_dir)
    assert rs.bad == [] and rs.incomplete == []
    assert [s for _, s in rs.skipped] == ["vLLM's PyTorch-benchmark copy of the result next to it"] * 2
    runs = rs.runs.sort_values("concurrency")
    assert runs["gpu"].tolist() == ["H100-SXM-80GB"] * 2
    assert runs["tp"].tolist() == [2, 2] and runs["num_gpus"].tolist() == [2, 2]
    assert runs["model"].tolist() == ["meta-llama/Llama-3.1-8B"] * 2
    assert runs["engine"].tolist() == ["vllm"] * 2
    assert runs["concurrency"].tolist() == [1.0, 4.0]
    # C=4: TTFT 0.4 s, TPOT 0.04 s; 16 prompts of 32 tokens; e2el = 0.4 + 31 x 0.04 = 1.64 s, duration
    # = 16 / 4 x 1.64 = 6.56 s, output 16 x 32 / 6.56 = 78.05 tok/s
    c4 = runs.iloc[1]
    assert c4["ttft_median_s"] == pytest.approx(0.4) and c4["tpot_mean_s"] == pytest.approx(0.04)
    assert c4["input_len_mean"] == 128 and c4["output_len_mean"] == 32
    assert c4["output_tokens_per_s"] == pytest.approx(16 * 32 / 6.56)


def test_never_overwrites(fake_vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    assert loadtest.main(argv(fake_vllm, out, "--concurrency", "1")) == 0
    (run_dir,) = out.iterdir()
    before = (run_dir / "concurrency-0001.json").read_text()
    # same second, same folder name: refused, the earlier result untouched
    monkeypatch.setattr(loadtest, "new_run_dir", lambda parent: run_dir)
    assert loadtest.main(argv(fake_vllm, out, "--concurrency", "1")) == 2
    assert (run_dir / "concurrency-0001.json").read_text() == before
    assert len(calls(tmp_path)) == 1


def test_new_run_dir_refuses_an_existing_folder(tmp_path: Path) -> None:
    when = datetime.datetime(2026, 11, 29, 15, 4, 5)
    first = loadtest.new_run_dir(tmp_path, when)
    assert first == tmp_path / "20261129-150405" and first.is_dir()
    with pytest.raises(loadtest.LoadTestError, match="already exists"):
        loadtest.new_run_dir(tmp_path, when)  # the same second again


def test_failed_level_is_one_line(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "1,4")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "concurrency-0001: vllm bench serve exited 1: Connection refused" in err
    assert len(calls(tmp_path)) == 1  # no second level after a failure


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), "give --concurrency"),
        (("--concurrency", "1,x"), "'1,x': 'x' is not a whole number"),
        (("--concurrency", "0,4"), "0 must be at least 1"),
        (("--concurrency", "4,4"), "a level is repeated"),
        (("--request-rate", "inf"), "must be a positive finite number"),
        (("--concurrency", "1", "--num-gpus", "3"), "--num-gpus 3 is not a multiple of --tp x --pp = 2"),
        (("--concurrency", "1", "--stop-factor", "0.5"), "--stop-factor 0.5 must be at least 1"),
        (("--concurrency", "1", "--num-warmups", "-1"), "--num-warmups -1 must be 0 or more"),
        (("--concurrency", "1", "--vllm", "/nonexistent/vllm"), "--vllm '/nonexistent/vllm': no such executable"),
    ],
)
def test_bad_arguments_are_one_line(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    args = argv(fake_vllm, tmp_path / "out", *extra)
    if "--vllm" in extra:
        i = args.index("--vllm")
        del args[i : i + 2]
    try:
        code = loadtest.main(args)  # a check of loadtest.py: returns 2
    except SystemExit as exc:  # argparse's check: exits 2
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0
    assert not calls(tmp_path)


def test_base_url_must_be_http(fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argv(fake_vllm, tmp_path / "out", "--concurrency", "1")
    args[args.index("--base-url") + 1] = "127.0.0.1:8000"
    assert loadtest.main(args) == 2
    assert "--base-url '127.0.0.1:8000' must start with http://" in capsys.readouterr().err


def test_dry_run_writes_nothing(fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "1,2", "--dry-run")) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and shlex.split(lines[0])[:3] == [str(fake_vllm), "bench", "serve"]
    assert not (tmp_path / "out").exists() and not calls(tmp_path)


def test_stop_reason_threshold() -> None:
    kw = {"ttft_slo_s": 2.0, "tpot_slo_s": 0.1, "factor": 3.0, "stat": "median"}
    # exactly 3 x SLO is not past it; 6.01 s is
    assert loadtest.stop_reason(6.0, 0.3, **kw) is None
    assert loadtest.stop_reason(6.01, 0.1, **kw) == "median TTFT 6.01 s > 3 x SLO 2 s"
    both = loadtest.stop_reason(7.0, 0.5, **kw)
    assert both is not None and "TTFT 7 s" in both and "TPOT 0.5 s > 3 x SLO 0.1 s" in both


def test_level_names_sort_in_load_order() -> None:
    names = [loadtest.Level("concurrency", c, 1).name for c in (1, 16, 128)]
    assert names == sorted(names) == ["concurrency-0001", "concurrency-0016", "concurrency-0128"]
    rates = [loadtest.Level("rate", r, 1).name for r in (0.5, 2, 12.25)]
    assert rates == sorted(rates) == ["rate-00000p500", "rate-00002p000", "rate-00012p250"]
    assert math.isclose(loadtest.Level("rate", 2.5, 1).value, 2.5)


def test_engine_knobs_and_formats_go_into_the_metadata(fake_vllm: Path, tmp_path: Path) -> None:
    extra = ["--weight-dtype", "fp8", "--engine-knob", "max_num_seqs=64", "--engine-knob", "enforce-eager=true"]
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "1", *extra)) == 0
    cmd = calls(tmp_path)[0]
    meta = set(cmd[cmd.index("--metadata") + 1 :])
    assert {"weight_dtype=fp8", "max_num_seqs=64", "enforce_eager=true"} <= meta
    assert not any(p.startswith("kv_cache_dtype=") for p in meta)  # not given: not written
    with pytest.raises(SystemExit):
        loadtest.parser().parse_args(argv(fake_vllm, tmp_path / "o2", "--engine-knob", "max_seqs=64"))


def test_rates_that_would_share_a_file_name_are_refused(fake_vllm: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        loadtest.parser().parse_args(argv(fake_vllm, tmp_path / "out", "--request-rate", "2.0001,2.0004"))


def test_a_server_that_answers_nothing_stops_the_sweep(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_DEAD", "1")
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "1,4")) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "concurrency-0001: no request completed (32 failed)" in err
    assert len(calls(tmp_path)) == 1 and "no level has a result gpucap can read" in out
    [run] = (tmp_path / "out").iterdir()
    assert "# failed: concurrency-0001: no request completed" in (run / "commands.log").read_text()


def test_a_hung_level_is_killed_with_its_children(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_VLLM_HANG", str(pid_file))
    t0 = time.monotonic()
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "1", "--level-timeout", "2")) == 2
    assert time.monotonic() - t0 < 30
    assert "no result within 2 s (set --level-timeout to allow more" in capsys.readouterr().err
    child = int(pid_file.read_text())
    time.sleep(0.2)
    stat = Path(f"/proc/{child}/stat")  # the benchmark's own child is gone too (or a zombie left to init)
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_out_that_is_a_file_is_one_line(fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    assert loadtest.main(argv(fake_vllm, tmp_path / "file", "--concurrency", "1")) == 2
    assert "--out " + str(tmp_path / "file") + " is a file" in capsys.readouterr().err


def test_default_level_timeout_grows_with_the_prompts(tmp_path: Path) -> None:
    args = loadtest.parser().parse_args(argv(Path("vllm"), tmp_path, "--concurrency", "4"))
    [level] = loadtest.plan_levels(args)
    expected = loadtest.BASE_TIMEOUT_S + loadtest.PER_PROMPT_TIMEOUT_S * level.num_prompts
    assert loadtest.level_timeout_s(args, level) == expected


def test_a_level_with_many_failed_requests_is_not_a_measurement(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_HALF", "1")
    assert loadtest.main(argv(fake_vllm, tmp_path / "out", "--concurrency", "1,4")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "concurrency-0001: 16 of 32 requests failed (more than 5%)" in err


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGHUP"])
def test_the_benchmark_goes_when_the_harness_goes(fake_vllm: Path, tmp_path: Path, sig: str) -> None:
    """The harness killed outright (SIGKILL: the kernel kills its benchmark, a parent-death
    signal) or its terminal closed (SIGHUP: it unwinds as for Ctrl-C and kills the benchmark's
    process group): no benchmark keeps loading the server."""
    import os
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "child.pid"
    env = dict(os.environ, FAKE_VLLM_HANG=str(pid_file), FAKE_VLLM_CALLS=str(tmp_path / "calls.jsonl"))
    harness = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "loadtest.py"), *argv(fake_vllm, tmp_path / "out", "--concurrency", "1")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    bench = int(Path(str(pid_file) + ".self").read_text())
    harness.send_signal(getattr(signal, sig))
    harness.wait(timeout=30)
    for _ in range(50):
        if _gone(bench):
            break
        time.sleep(0.1)
    assert _gone(bench)
    if sig == "SIGHUP":
        assert harness.returncode == 130 and _gone(int(pid_file.read_text()))  # its own child too


def test_a_server_that_never_answers_fails_in_seconds(
    fake_vllm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that accepts connections and never answers: the probe before the sweep gives up
    after --probe-timeout (2 s here), not after a level's 920 s; nothing listening is one line too."""
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    args = argv(fake_vllm, tmp_path / "out", "--concurrency", "1")
    args[args.index("http://127.0.0.1:8000")] = f"http://127.0.0.1:{port}"
    args[args.index("--probe-timeout") + 1] = "2"
    t0 = time.monotonic()
    assert loadtest.main(args) == 2
    assert time.monotonic() - t0 < 20
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did not answer a one-token request in 2 s" in err
    assert calls(tmp_path) == []  # no level started
    listener.close()
    assert loadtest.main(args) == 2  # nothing listens there now
    assert "no server answers" in capsys.readouterr().err
