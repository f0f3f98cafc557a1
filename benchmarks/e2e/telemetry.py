"""`make e2e-telemetry`: calibrate gpucap from the engine's own telemetry, with no client result
file, and check it against the load test that produced the telemetry (~8 min).

    .venv/bin/python benchmarks/e2e/telemetry.py [--levels 1:110,4:260,8:330,16:450] [--window 15]
        [--ttft-slo 0.3 --tpot-slo 0.02] [--reuse benchmarks/e2e/out/telemetry-<time>]

1. The CPU server of `make e2e` (``suite.VllmServer``: the tiny Llama, float32, 1 GiB of KV
   cache, max_num_seqs 256, 2048 batched tokens), logging every engine step
   (``--enable-logging-iteration-details``), its ``/metrics`` scraped every 2 s.
2. `benchmarks/loadtest.py` at each closed-loop level ``C:N`` (N prompts at concurrency C, lengths
   256 / 64 within +/-50%: varied traffic, ~60 s a level on this machine).
3. gpucap from the telemetry alone (``gpucap.telemetry``, ``gpucap.calibration.telemetryfit``):
   windows of ``--window`` s, the steady ones simulated as closed loops at their requests in
   flight, the step log binned by tokens, a weak prior around vLLM's defaults; free:
   ``TELEMETRY_FREE``.
4. Checked against the client's own results of the same runs: each level's mean TTFT, TPOT and
   output tokens/s predicted with the telemetry-fitted coefficients (the HTTP front end at its
   defaults, which telemetry does not see); the sweep's SLO-limited concurrency, measured from the
   client results and predicted with its 95% interval; and the coefficients of a fit to the
   client results (`make e2e`'s fit) beside the telemetry's, each with its standard error.

Everything lands in ``<out>/telemetry-<time>/`` (scrapes, server log, load tests, ``check.md``).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from fit import FREE, as_served, server_engine  # noqa: E402
from suite import KEY, KV_GIB, NAME, Server, VllmServer, prepare, say  # noqa: E402

from gpucap.calibration.calibrate import calibrate  # noqa: E402
from gpucap.calibration.fitlimits import limit_table  # noqa: E402
from gpucap.calibration.limits import find_sweeps  # noqa: E402
from gpucap.calibration.loadtests import cases_from_runs  # noqa: E402
from gpucap.calibration.results import read_results  # noqa: E402
from gpucap.calibration.telemetryfit import TELEMETRY_FREE, fit_telemetry, weak_prior, window_targets  # noqa: E402
from gpucap.calibration.validate import validate  # noqa: E402
from gpucap.config import SLO  # noqa: E402
from gpucap.physics.coefficients import Coefficients  # noqa: E402
from gpucap.telemetry.memcheck import memory_check  # noqa: E402
from gpucap.telemetry.scrapes import read_scrapes  # noqa: E402
from gpucap.telemetry.steplog import read_step_log  # noqa: E402
from gpucap.telemetry.windows import cut_windows  # noqa: E402

SERVER = Server()
INPUT_LEN, OUTPUT_LEN, RANGE = 256, 64, 0.5


def load_test(venv: Path, model: Path, port: int, levels: list[tuple[int, int]], out: Path) -> list[Path]:
    """One `benchmarks/loadtest.py` run per level (its own folder each)."""
    folders = []
    for c, n in levels:
        cmd = [
            sys.executable, str(ROOT / "benchmarks" / "loadtest.py"), "--base-url", f"http://127.0.0.1:{port}",
            "--model", NAME, "--tokenizer", str(model), "--vllm", str(venv / "bin" / "vllm"), "--gpu", KEY,
            "--gpucap-model", str(model / "config.json"), "--input-len", str(INPUT_LEN), "--output-len",
            str(OUTPUT_LEN), "--range-ratio", str(RANGE), "--concurrency", str(c), "--num-prompts", str(n),
            "--num-warmups", "2", "--ttft-slo", "1000", "--tpot-slo", "1000", "--level-timeout", "900",
            "--engine-knob", f"max_num_seqs={SERVER.max_num_seqs}",
            "--engine-knob", f"max_num_batched_tokens={SERVER.max_num_batched_tokens}",
            "--engine-knob", "block_size=128", "--engine-knob", "enforce_eager=true", "--out", str(out / f"c{c:03d}"),
        ]  # fmt: skip
        subprocess.run(cmd, check=True)
        folders.append(sorted((out / f"c{c:03d}").iterdir())[-1])
    return folders


def fit_args(model: Path) -> argparse.Namespace:
    return argparse.Namespace(
        model=str(model / "config.json"), gpu=KEY, dtype="fp32", kv_cache_gib=KV_GIB,
        max_num_seqs=SERVER.max_num_seqs, max_num_batched_tokens=SERVER.max_num_batched_tokens, block_size=128,
        eager=True,
    )  # fmt: skip


def deployment(model: Path) -> dict:
    """The server as a row of the cases schema (what `gpucap telemetry`'s options build)."""
    engine = server_engine(fit_args(model))
    return {
        "case_id": "telemetry", "model": str(model / "config.json"), "gpu": KEY, "num_gpus": 1, "tp": 1,
        "engine": "vllm", "engine_version": "0.32.0", "weight_dtype": "fp32", "kv_cache_dtype": "fp32",
        "max_num_seqs": engine.max_num_seqs, "max_num_batched_tokens": engine.max_num_batched_tokens,
        "block_size": engine.block_size, "gpu_memory_utilization": engine.gpu_memory_utilization,
        "enforce_eager": True,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--levels", default="1:110,4:260,8:330,16:450", help="closed-loop levels C:prompts")
    ap.add_argument("--window", type=float, default=15.0, help="telemetry window, s")
    ap.add_argument("--ttft-slo", type=float, default=0.3, help="s: mean TTFT of the limit")
    ap.add_argument("--tpot-slo", type=float, default=0.02, help="s: mean TPOT of the limit")
    ap.add_argument("--venv", type=Path, default=Path(os.environ.get("E2E_VENV", HERE / ".venv")))
    ap.add_argument("--reuse", type=Path, default=None, help="an earlier run folder: fit and check it again")
    args = ap.parse_args()
    levels = [(int(c), int(n)) for c, n in (item.split(":") for item in args.levels.split(","))]
    if args.reuse:
        run, model = args.reuse, HERE / "model"
        folders = [sorted((run / "loadtest" / f"c{c:03d}").iterdir())[-1] for c, _ in levels]
    else:
        run = args.out / f"telemetry-{dt.datetime.now():%Y%m%d-%H%M%S}"
        run.mkdir(parents=True, exist_ok=False)
        model, cpu = prepare(args.venv, run, os.environ.get("PYTHON", "python3"))
        srv = VllmServer(args.venv, model, SERVER, run / "server.log")
        try:
            srv.wait_ready()
            srv.scrape(run / "metrics")
            say(f"server ready on port {srv.port}; scraping into {run / 'metrics'}")
            folders = load_test(args.venv, model, srv.port, levels, run / "loadtest")
        finally:
            srv.stop()
    os.environ["GPUCAP_GPU_FILE"] = str(run / "cpu.csv")
    say(f"fitting from the telemetry in {run}")
    report = [f"# Telemetry against the load test ({run.name})", ""]
    series = read_scrapes(run / "metrics")
    windows = cut_windows(series, args.window)
    steps = read_step_log(run / "server.log")
    row = deployment(model)
    targets, skipped = window_targets(windows, row, "closed")
    start = Coefficients.for_engine("vllm")
    tf = fit_telemetry(
        targets, start=start, free=TELEMETRY_FREE, prior=weak_prior(start, TELEMETRY_FREE), steps=steps,
        step_hw=targets[0].case.hw, skipped=skipped,
        span=(windows.windows[0].start_s, windows.windows[-1].end_s),
    )  # fmt: skip
    print(tf.report())
    check = memory_check(series, targets[0].case.hw)
    report += ["## Memory", "", "```", check.report(), "```", ""]
    report += [f"{len(windows.windows)} windows of {args.window:g} s, {len(targets)} steady and fitted; "
               f"{len(steps.real)} steps in the log", "", "```", tf.report(), "```", ""]  # fmt: skip

    rs = read_results(folders)
    cases = as_served(
        cases_from_runs(rs.runs, weight_dtype="fp32", kv_cache_dtype="fp32"), server_engine(fit_args(model))
    )
    cases = cases.sort_values("concurrency").reset_index(drop=True)
    pred = validate(cases, tf.fit.coefficients)
    table = pd.DataFrame({"concurrency": cases["concurrency"]})
    for m, label in (("output_tok_s", "tok/s"), ("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms")):
        table[f"{label} measured"] = pred[f"{m}_measured"]
        table[f"{label} telemetry fit"] = pred[f"{m}_predicted"]
        table[f"{label} error"] = (pred[f"{m}_ratio"] - 1).abs()
    report += [
        "## Each level's client-measured means, predicted from the telemetry fit",
        "",
        "```\n" + table.to_string(index=False, float_format=lambda v: f"{v:.3g}") + "\n```",
        "",
    ]

    slo = SLO(args.ttft_slo, args.tpot_slo, "mean")
    sweeps, why = find_sweeps(cases, slo)
    lt = copy.copy(tf.fit)
    lim = limit_table(sweeps, slo, start, lt.coefficients, lt.free, lt.covariance) if sweeps else pd.DataFrame()
    report += [
        f"## SLO-limited concurrency ({slo})",
        "",
        "```\n" + lim.to_string(index=False, float_format=lambda v: f"{v:.3g}") + "\n```"
        if not lim.empty
        else "; ".join(why),
        "",
    ]

    client_fit = calibrate(cases, start=start, free=FREE, method="simulate")
    names = sorted(set(FREE) | set(TELEMETRY_FREE))
    coef = pd.DataFrame(
        {
            "coefficient": names,
            "telemetry": [getattr(tf.fit.coefficients, n) for n in names],
            "telemetry se": [tf.fit.stderr.get(n, np.nan) for n in names],
            "load test": [getattr(client_fit.coefficients, n) for n in names],
            "load test se": [client_fit.stderr.get(n, np.nan) for n in names],
        }
    )
    coef["within 1.96 se"] = (coef["telemetry"] - coef["load test"]).abs() <= 1.96 * np.hypot(
        coef["telemetry se"].fillna(0), coef["load test se"].fillna(0)
    )
    report += [
        "## Coefficients: telemetry fit and load-test fit",
        "",
        "```\n" + coef.to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n```",
        "",
    ]
    text = "\n".join(report)
    print(text)
    out = run / f"check-{dt.datetime.now():%Y%m%d-%H%M%S}.md"
    out.write_text(text)
    say(f"done; {out}")


if __name__ == "__main__":
    main()
