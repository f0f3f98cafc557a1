"""Physical ranges of the coefficients: the shipped file, bad range files, and a fit that leaves
its range flagged "missing mechanism" beside the same fit within the ranges."""

import dataclasses
from types import SimpleNamespace

import pytest

from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.physical import RANGES_FILE, device_class, read_physical_ranges
from gpucap.calibration.validate import synthetic_cases
from gpucap.catalog.gpus import get_gpu
from gpucap.physics.coefficients import COEFFICIENT_INFO, Coefficients

from .conftest import ROOT

HEADER = "coefficient,device,lower,upper,source\n"


def test_every_coefficient_has_a_sourced_range_on_each_device() -> None:
    ranges = read_physical_ranges()
    assert {(n, d) for n in COEFFICIENT_INFO for d in ("gpu", "cpu")} == set(ranges)
    assert all(r.source for r in ranges.values())
    # the best BF16 matmul measured: A100 SXM 267.9 of 312 TFLOP/s, H100 SXM 792.1 of 989
    # (ml-engineering, MAMF table): the GPU ceiling of u_compute is at least the better of the two
    assert ranges[("u_compute", "gpu")].upper >= 267.9 / 312 > 792.1 / 989
    # FlashAttention-2 on H100: 35% of peak (FlashAttention-3 paper); the floor is below it
    assert ranges[("u_compute", "gpu")].lower <= 0.35


def test_a_lower_bound_above_the_upper_names_the_line(tmp_path) -> None:
    swapped = RANGES_FILE.read_text().replace("u_compute,gpu,0.30,0.86", "u_compute,gpu,0.86,0.30")
    path = tmp_path / "ranges.csv"
    path.write_text(swapped)
    with pytest.raises(ValueError, match=r"ranges.csv line 2: u_compute on gpu: lower 0.86 is above upper 0.3"):
        read_physical_ranges(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("u_magic,gpu,0,1,made up", "line 2: unknown coefficient 'u_magic'"),
        ("u_hbm,tpu,0.5,0.9,x", "line 2: device 'tpu'"),
        ("u_hbm,gpu,0.5,0.9,", "line 2: u_hbm on gpu has no source"),
        ("u_hbm,gpu,half,0.9,x", "line 2: lower 'half' is not a finite number"),
        ("u_hbm,gpu,0.1,0.9,x", r"line 2: u_hbm on gpu: \[0.1, 0.9\] reaches outside the coefficient's bounds"),
    ],
)
def test_a_bad_row_names_its_line_and_field(tmp_path, row: str, message: str) -> None:
    path = tmp_path / "ranges.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(ValueError, match=message):
        read_physical_ranges(path)


def test_every_coefficient_and_device_needs_a_row(tmp_path) -> None:
    path = tmp_path / "ranges.csv"
    path.write_text("\n".join(RANGES_FILE.read_text().splitlines()[:-1]) + "\n")  # t_frontend_s on cpu dropped
    with pytest.raises(ValueError, match="no range for t_frontend_s on cpu"):
        read_physical_ranges(path)


def test_device_class_of_a_measured_cpu_row() -> None:
    cpu_file = ROOT / "data" / "telemetry" / "vllm-cpu-tiny-llama" / "gpus.csv"  # vendor "CPU"
    assert device_class(SimpleNamespace(gpu=get_gpu("CPU-E2E", extra=cpu_file))) == "cpu"  # type: ignore[arg-type]
    assert device_class(SimpleNamespace(gpu=get_gpu("H100-SXM-80GB"))) == "gpu"  # type: ignore[arg-type]


def test_a_fit_below_its_range_is_flagged_and_refitted_within_it() -> None:
    # runs generated with u_hbm 0.35: inside the fit's bounds [0.3, 1], below the GPU range
    # [0.5, 0.95] (data/coefficient-ranges.csv), as a fit standing in for a missing mechanism is
    truth = Coefficients(u_compute=0.6, u_hbm=0.35, overlap=0.0, t_overhead_s=2e-3, t_seq_s=10e-6)
    cases = synthetic_cases(
        (("meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1),), (1, 8), ((1000, 200),), truth, noise=0.0
    )
    start = Coefficients(u_compute=0.6, u_hbm=0.8, overlap=0.0, t_overhead_s=2e-3, t_seq_s=10e-6)
    fit = calibrate(cases, start=start, free=("u_hbm",))
    assert fit.coefficients.u_hbm == pytest.approx(0.35, rel=1e-3)
    [flag] = [f for f in fit.flags if f.startswith("missing mechanism")]
    assert "u_hbm = 0.35 is outside its physical range [0.5, 0.95] on GPUs (below)" in flag
    assert "driven by the fixed-concurrency runs (2:" in flag
    assert fit.bounded is not None and fit.bounded.coefficients.u_hbm == pytest.approx(0.5)
    assert fit.provenance["device"] == "gpu" and fit.bounded.provenance["within_ranges"] is True
    report = fit.report()
    assert "[[Within physical ranges]]" in report and "u_hbm          = 0.5" in report
    assert fit.to_dict()["within_ranges"]["coefficients"]["u_hbm"] == pytest.approx(0.5)
    assert "Within physical ranges" in fit._repr_html_()
    # with a range that holds 0.35 (a testbed's own range file): no flag and no second fit
    ranges = read_physical_ranges()
    ranges[("u_hbm", "gpu")] = dataclasses.replace(ranges[("u_hbm", "gpu")], lower=0.3)
    inside = calibrate(cases, start=start, free=("u_hbm",), ranges=ranges)
    assert inside.bounded is None and not any(f.startswith("missing mechanism") for f in inside.flags)
    # fitted within the ranges only
    within = calibrate(cases, start=start, free=("u_hbm",), within_ranges=True)
    assert within.coefficients.u_hbm == pytest.approx(0.5) and within.at_bound == {"u_hbm": "lower"}
