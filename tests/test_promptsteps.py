"""u_compute from the server's own prompt steps, the rest fitted to its load test
(``gpucap.calibration.promptsteps``), on the shipped capture of vLLM 0.32's CPU server
(``data/telemetry/vllm-cpu-tiny-llama``: its step log and the load test that ran beside it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpucap.calibration.loadtests import cases_from_runs
from gpucap.calibration.promptsteps import calibrate_with_prompt_steps, result_spans_s
from gpucap.calibration.results import read_results
from gpucap.calibration.stepfit import predicted_logged_s, step_compositions
from gpucap.calibration.validate import case_hardware
from gpucap.cli.main import main
from gpucap.telemetry.steplog import read_step_log

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "vllm-cpu-tiny-llama"
RESULTS = sorted((CAPTURE / "loadtest").glob("*.json"))
FREE = ("u_compute", "u_hbm", "t_layer_s", "t_seq_s")


@pytest.fixture(scope="module")
def cpu_gpu():
    """The capture's CPU in the catalog for this module's tests only."""
    from gpucap.catalog import gpus

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpus, "_ADDED_FILES", [])
        gpus.add_gpu_file(CAPTURE / "gpus.csv")
        yield


@pytest.fixture(scope="module")
def cases(cpu_gpu) -> pd.DataFrame:
    """The load test's runs as the server ran them (1 GiB of KV cache)."""
    runs = read_results(CAPTURE / "loadtest").runs
    return cases_from_runs(runs, weight_dtype="fp32", kv_cache_dtype="fp32").assign(kv_cache_memory_gib=1.0)


def test_a_runs_span_ends_at_its_date_and_lasts_its_duration(tmp_path: Path) -> None:
    # 2 December 21:50:16, 60.44 s: on the log's clock (31-day months) (11 x 31 + 1) days, 21 h, 50 min, 16 s
    end = ((11 * 31 + 1) * 24 + 21) * 3600 + 50 * 60 + 16
    (span,) = result_spans_s([CAPTURE / "loadtest" / "concurrency-0004.json"])
    assert span == pytest.approx((end - 60.4414 - 1, end + 1), abs=1e-3)
    bad = tmp_path / "no-date.json"
    bad.write_text(json.dumps({"duration": 10.0}))
    with pytest.raises(ValueError, match=r"no-date\.json: no usable date"):
        result_spans_s([bad])


def test_u_compute_comes_from_the_prompt_steps_and_is_held(cases) -> None:
    hw, _, _ = case_hardware(cases.iloc[0])
    assert hw.engine.overlap_host is False  # vLLM's CPU platform runs no step ahead
    log = read_step_log(CAPTURE / "server-steps.log.gz")
    got = calibrate_with_prompt_steps(cases, log, RESULTS, free=FREE, method="closed-form")
    assert got.fit.coefficients.u_compute == got.u_compute and "u_compute" not in got.fit.free
    assert got.fit.provenance["u_compute_from"]["prompt_steps"] == got.prompt_steps > 100
    # with the other coefficients refitted around it, the prompt steps of the runs are still timed
    # right in the median: the refit did not move what the prompt steps depend on
    steps = step_compositions(log.during(result_spans_s(RESULTS)))
    prompt = steps[steps["prefill"] > 0]
    ratio = np.log(predicted_logged_s(hw, got.fit.coefficients, prompt) / prompt["logged_s"].to_numpy())
    assert abs(float(np.median(ratio))) < 0.05


def test_a_log_for_several_servers_or_without_runs_is_refused(cases) -> None:
    log = read_step_log(CAPTURE / "server-steps.log.gz")
    two = pd.concat([cases, cases.assign(tp=2)], ignore_index=True)
    with pytest.raises(ValueError, match="a step log times one server; the runs hold 2 deployments"):
        calibrate_with_prompt_steps(two, log, RESULTS, free=FREE)
    with pytest.raises(ValueError, match="no vllm bench serve result file"):
        calibrate_with_prompt_steps(cases, log, [], free=FREE)
    with pytest.raises(ValueError, match="u_compute is not free"):
        calibrate_with_prompt_steps(cases, log, RESULTS, free=("u_hbm",))


def test_a_log_from_another_time_is_refused(cases, tmp_path: Path) -> None:
    """Runs stamped a day after the log's last step: nothing to match, and the message gives both times
    (the first run ended 21:49:08 after 65.07 s, less a second of slack: 21:48:01.9; the last ended
    21:52:34, plus a second)."""
    moved = []
    for path in RESULTS:
        result = json.loads(path.read_text())
        result["date"] = "20261203" + result["date"][8:]  # the capture ran on 2 December
        moved.append(tmp_path / path.name)
        moved[-1].write_text(json.dumps(result))
    log = read_step_log(CAPTURE / "server-steps.log.gz")
    with pytest.raises(
        ValueError,
        match=r"no step logged while the runs ran \(12-03 21:48:01 to 12-03 21:52:35; the log runs 12-02 21:48:01 to 12-02 21:52:34\)",
    ):
        calibrate_with_prompt_steps(cases, log, moved, free=FREE, method="closed-form")


def test_the_command_line_takes_a_step_log(cpu_gpu, tmp_path: Path, capsys) -> None:
    out = tmp_path / "fit.json"
    argv = [
        "calibrate", str(CAPTURE / "loadtest"), "--gpu-file", str(CAPTURE / "gpus.csv"),
        "--free", ",".join(FREE), "--step-log", str(CAPTURE / "server-steps.log.gz"), "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    assert "prompt steps during these runs" in capsys.readouterr().err
    saved = json.loads(out.read_text())
    assert saved["provenance"]["u_compute_from"]["step_log"].endswith("server-steps.log.gz")
    assert saved["coefficients"]["u_compute"]["free"] is False
    assert saved["coefficients"]["u_hbm"]["free"] is True


def test_a_step_log_beside_a_cases_table_is_a_one_line_error(cases, tmp_path: Path, capsys) -> None:
    """A cases CSV says nothing of when its runs ran: the step log cannot be matched to them."""
    table = tmp_path / "cases.csv"
    cases.to_csv(table, index=False)
    out = tmp_path / "fit.json"
    argv = ["calibrate", str(table), "--step-log", str(CAPTURE / "server-steps.log.gz"), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no vllm bench serve result file" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
