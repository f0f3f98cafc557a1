"""gpucap.parallel: the same numbers serially, on joblib's processes and on a Dask cluster; bad
input named; a task's error and a dead worker named by the item."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpucap.cli.main import main
from gpucap.parallel import Runner, WorkerDied, check_jobs, connect, default_jobs, parallel_map, runner


def _square(x: int) -> int:
    return x * x


def _fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return x


def _dies_on_two(x: int) -> int:
    if x == 2:
        os._exit(1)  # the worker process dies, as one killed for memory does
    return x


def _dies_once(item: tuple[int, str]) -> int:
    """Kills its worker the first time it runs item 1 (a marker file remembers), then succeeds."""
    x, marker = item
    if x == 1 and not Path(marker).exists():
        Path(marker).write_text("died once")
        os._exit(1)
    return x


def _nested(x: int) -> list[int]:
    return parallel_map(_square, [x, x + 1], jobs=2)


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_results_come_back_in_order_wherever_they_ran(dask_client) -> None:
    items = list(range(12))
    expected = [x * x for x in items]
    assert parallel_map(_square, items, jobs=1) == expected
    assert parallel_map(_square, items, jobs=2) == expected
    assert parallel_map(_square, items, dask=dask_client) == expected
    assert parallel_map(_square, [], jobs=2) == []


def test_validate_gives_the_same_numbers_serially_on_processes_and_on_dask(shared_cases, dask_client) -> None:
    from gpucap.calibration.validate import read_cases, validate

    cases = read_cases(shared_cases)
    sample = cases[cases["isl"].notna()].groupby(["source_id", "load_mode"]).head(1).head(8)
    serial = validate(sample, n_jobs=1)
    assert serial["output_tok_s_predicted"].notna().sum() >= 4  # simulated rows, not only errors
    pd.testing.assert_frame_equal(validate(sample, n_jobs=2), serial, check_exact=True)
    pd.testing.assert_frame_equal(validate(sample, dask=dask_client), serial, check_exact=True)


def test_error_tables_hold_out_the_same_way_wherever_the_fits_ran(shared_cases, dask_client) -> None:
    from gpucap.calibration.analysis import error_tables
    from gpucap.calibration.validate import read_cases

    cases = read_cases(shared_cases)
    # dense models of two labs on SGLang, two load modes each: a few seconds of fits
    labs = ["DataCrunch-h200-sglang", "GPUStack-perf-lab"]
    cases = cases[cases["source_id"].isin(labs) & (cases["engine"] == "sglang")]
    cases = cases[~cases["model"].astype(str).str.contains("gpt-oss|Qwen3-30B|GLM|DeepSeek|Mixtral|A3B|A22B")]
    kw = dict(by=("source_id",), variants=("loso", "lomode"), method="closed-form", free=("u_compute", "u_hbm"))
    serial = error_tables(cases, n_jobs=1, **kw)
    assert set(serial["variant"]) == {"loso", "lomode"}
    for elsewhere in (error_tables(cases, n_jobs=2, **kw), error_tables(cases, dask=dask_client, **kw)):
        pd.testing.assert_frame_equal(elsewhere, serial, check_exact=True)
        assert elsewhere.attrs["notes"] == serial.attrs["notes"]


def test_a_trace_is_sized_the_same_on_one_process_or_two() -> None:
    from gpucap.config import SLO, hardware
    from gpucap.physics.coefficients import Coefficients
    from gpucap.planning.trace import Trace, size_trace

    rng = np.random.default_rng(7)
    n = 600
    trace = Trace(np.cumsum(rng.exponential(1 / 12.0, n)), rng.integers(200, 1500, n).astype(float),
                  rng.integers(20, 300, n).astype(float))  # fmt: skip
    hw = hardware("meta-llama/Llama-3.1-8B-Instruct", "L40S", tp=1)
    coef = Coefficients.for_engine("vllm")
    slo = SLO(ttft_s=1.0, tpot_s=0.05, statistic="p90")
    one = size_trace(hw, coef, trace, slo, start=1, n_jobs=1, chunk_s=15.0)  # pieces of 15 s, as a month's
    two = size_trace(hw, coef, trace, slo, start=1, n_jobs=2, chunk_s=15.0)
    assert one.replicas == two.replicas and one.replicas is not None and one.replicas >= 2
    pd.testing.assert_frame_equal(one.tried, two.tried, check_exact=True)


def test_a_map_inside_a_task_runs_serially() -> None:
    assert parallel_map(_nested, [1, 2], jobs=2) == [[1, 4], [4, 9]]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_jobs_must_be_a_whole_number_of_at_least_one(bad) -> None:
    with pytest.raises(ValueError, match=r"jobs must be a whole number of processes >= 1 .* got"):
        check_jobs(bad)
    with pytest.raises(ValueError, match="jobs must be"):
        runner(bad)


def test_gpucap_jobs_from_the_environment_is_checked(monkeypatch) -> None:
    monkeypatch.setenv("GPUCAP_JOBS", "3")
    assert default_jobs() == 3 and runner().jobs == 3
    monkeypatch.setenv("GPUCAP_JOBS", "zero")
    with pytest.raises(ValueError, match="GPUCAP_JOBS='zero' must be a whole number"):
        default_jobs()
    monkeypatch.delenv("GPUCAP_JOBS")
    assert default_jobs() == (os.cpu_count() or 1)


@pytest.mark.parametrize("flag", ["0", "-2"])
def test_the_cli_refuses_jobs_below_one(flag, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "cases.csv", "--jobs", flag])
    assert exc.value.code == 2
    assert f"argument --jobs: {int(flag)} must be at least 1" in capsys.readouterr().err


def test_an_unreachable_scheduler_is_one_line_naming_it() -> None:
    with pytest.raises(ValueError) as exc:
        connect("tcp://127.0.0.1:9", timeout_s=1.0)
    text = str(exc.value)
    assert "no Dask scheduler answered at tcp://127.0.0.1:9 within 1 s" in text and "\n" not in text


def test_the_cli_names_an_unreachable_scheduler(monkeypatch, capsys, tmp_path) -> None:
    import gpucap.parallel as parallel

    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT_S", 1.0)
    cases = tmp_path / "cases.csv"
    cases.write_text("model,gpu\n")
    code = main(["validate", str(cases), "--dask", "tcp://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and "tcp://127.0.0.1:9" in err and err.count("\n") == 1


def test_a_task_error_names_its_item() -> None:
    for jobs in (1, 2):
        with pytest.raises(ValueError, match="three is not allowed") as exc:
            parallel_map(_fails_on_three, range(5), jobs=jobs, label=lambda _, x: f"row {x}")
        assert "(while running row 3)" in exc.value.__notes__


def test_a_worker_that_dies_is_retried_once_then_named(tmp_path) -> None:
    marker = str(tmp_path / "marker")
    assert parallel_map(_dies_once, [(k, marker) for k in range(4)], jobs=2) == [0, 1, 2, 3]
    with pytest.raises(WorkerDied, match="a worker process died twice running row 2"):
        parallel_map(_dies_on_two, range(4), jobs=2, label=lambda _, x: f"row {x}")


def test_tasks_see_the_gpu_files_the_caller_added(tmp_path) -> None:
    from gpucap.catalog import gpus

    lines = (Path(__file__).parents[1] / "data" / "gpus.csv").read_text().splitlines()
    header, row = lines[0], next(line for line in lines if line.startswith("L40S-48GB,"))
    path = tmp_path / "mine.csv"
    path.write_text(header + "\n" + row.replace("L40S-48GB,", "MY-L40S,", 1) + "\n")
    gpus.add_gpu_file(path)
    try:
        found = parallel_map(gpus.get_gpu, ["MY-L40S", "L40S-48GB"], jobs=2)
    finally:
        gpus._ADDED_FILES.remove(str(path.resolve()))
    assert found[0].key == "MY-L40S" and found[0].hbm_bytes_per_s == found[1].hbm_bytes_per_s


def test_the_runner_is_as_wide_as_its_processes_or_cluster(dask_client) -> None:
    assert Runner().width == 1 and Runner(jobs=3).width == 3
    assert runner(dask=dask_client).width == 2  # two single-threaded workers
