"""``gpucap calibrate``: fit the efficiency coefficients to load-test results; and the reading of
results (files, folders, a manifest, a cases CSV) that ``gpucap errors`` shares."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucap.calibration.settings import FitSettings
from gpucap.cli.args import output_file
from gpucap.cli.common import History, OutputFile, add_json, add_parallel, parallel_runner
from gpucap.cli.fields import add_options, values
from gpucap.config import SLO, Deployment, EngineConfig
from gpucap.options import option
from gpucap.types import LIMIT_STATISTICS


@dataclass(frozen=True)
class Results:
    """Where load-test results are read from (``gpucap.calibration.results``), for ``calibrate``
    and ``errors``."""

    results: tuple[str, ...] = option(
        flag="", nargs="+", help="result files or folders (vLLM, SGLang, GenAI-Perf, GuideLLM), or a cases CSV"
    )
    manifest: str | None = option(None, help="manifest mapping file globs to gpu/tp/engine/model")
    length_dist: str = option("fixed", choices=("fixed", "dataset"), help="dataset: ShareGPT-like output lengths")


@dataclass(frozen=True)
class CalibrateOptions:
    """``gpucap calibrate``'s own options; the fit's settings are ``FitSettings``'."""

    fix: tuple[str, ...] = option((), nargs="append", metavar="NAME=VALUE", help="hold a coefficient at a value")
    targets: str = option(
        "runs",
        help="what to fit: runs (every run's metrics), limits (every sweep's SLO-limited concurrency or "
        "rate at --ttft-slo/--tpot-slo/--stat), or runs,limits",
    )
    intervals: str = option(
        "covariance",
        choices=("covariance", "sweep", "model"),
        help="where the bands and the limits' intervals come from: the coefficients' covariance (default), or "
        "refits leaving out each sweep or each model (out of sample, with their coverage)",
    )
    save_unconverged: bool = option(False, kind="switch", help="save a fit that did not converge")
    step_log: str | None = option(
        None,
        help="the server's log with --enable-logging-iteration-details (vLLM), written while these runs ran: u_compute "
        "is taken from its prompt steps, not fitted to the runs (gpucap.calibration.promptsteps)",
    )


def add_parser(sub: Any) -> None:
    c = sub.add_parser("calibrate", help="fit the efficiency coefficients to load-test results")
    add_options(c, Results, ("results",))
    add_options(c, OutputFile, helps={"out": "coefficients JSON to write (never overwritten unless --overwrite)"})
    results_options(c)
    add_options(c, FitSettings)
    add_options(c, CalibrateOptions, ("fix", "targets", "step_log"))
    add_options(
        c,
        SLO,
        choices={"statistic": LIMIT_STATISTICS},
        aliases={"ttft_s": ("--slo-ttft",), "tpot_s": ("--slo-tpot",)},
        helps={"statistic": "statistic the SLOs apply to (the closed forms predict means: mean or median)"},
    )
    add_options(c, CalibrateOptions, ("intervals",))
    add_json(c, "the saved calibration, instead of the report,")
    add_options(c, CalibrateOptions, ("save_unconverged",))
    add_parallel(c, "simulated runs and the held-out refits")
    add_options(c, History)


def results_options(p: argparse.ArgumentParser) -> None:
    """What `calibrate` and `errors` need to read load-test results: hardware and formats for
    runs whose files and manifest do not say, a manifest, extra GPUs, the length distribution."""
    fallback = ("gpu", "model", "num_gpus", "tp", "pp", "ep")
    add_options(
        p,
        Deployment,
        (*fallback, "gpu_file", "weight_dtype", "kv_dtype"),
        defaults=dict.fromkeys(fallback),
        helps={
            **{name: f"{name} for runs whose files and manifest do not say" for name in fallback},
            "gpu_file": "CSV of extra GPUs (columns of data/gpus.csv) the cases name",
            "weight_dtype": "weight format of runs that do not say (default: the checkpoint's own)",
        },
    )
    add_options(
        p,
        EngineConfig,
        ("engine",),
        defaults={"engine": None},
        choices={"engine": None},  # the names result files use pass too (tensorrt-llm, nim: ENGINE_ALIASES)
        helps={"engine": "engine for runs that do not say"},
    )
    add_options(p, Results, ("manifest", "length_dist"))


def add_gpu_file(a: argparse.Namespace) -> None:
    """``--gpu-file``'s GPUs join the catalog for this command (read now: a bad file stops it)."""
    if a.gpu_file:
        from gpucap.catalog.gpus import add_gpu_file

        add_gpu_file(a.gpu_file)


def read_calibration_cases(a: argparse.Namespace) -> tuple[Any, Any]:
    """Cases to fit (schema of measured-public.csv) and the tidy runs they came from (or None)."""

    add_gpu_file(a)
    from gpucap.calibration.cases import csv_columns
    from gpucap.calibration.loadtests import cases_from_runs
    from gpucap.calibration.results import read_results, runs_needing
    from gpucap.calibration.validate import read_cases

    first = Path(a.results[0])
    if len(a.results) == 1 and first.suffix == ".csv" and "load_mode" in csv_columns(first, "results file"):
        return read_cases(first), None
    defaults = {
        k: v
        for k, v in {
            "gpu": a.gpu,
            "engine": a.engine,
            "model": a.model,
            "num_gpus": a.num_gpus,
            "tp": a.tp,
            "pp": a.pp,
            "ep": a.ep,
        }.items()
        if v is not None
    }
    rs = read_results([Path(p) for p in a.results], manifest=a.manifest, defaults=defaults)
    for file, why in rs.bad:
        print(f"not read: {file}: {why}", file=sys.stderr)
    for run, why in runs_needing(rs):
        print(f"not usable: {run}: {why} (give it with --gpu/--tp/--model/--engine or a manifest)", file=sys.stderr)
    return cases_from_runs(
        rs.runs, weight_dtype=a.weight_dtype, kv_cache_dtype=a.kv_dtype, length_dist=a.length_dist
    ), rs.runs


def run(a: argparse.Namespace) -> int:
    from gpucap.calibration.analysis import error_table
    from gpucap.calibration.calibrate import calibrate

    targets = tuple(t.strip() for t in a.targets.split(",") if t.strip())
    out = output_file(a.out, overwrite=a.overwrite, inputs=a.results)  # checked before the fit
    fixed = {}
    for item in a.fix or ():
        name, _, value = item.partition("=")
        try:
            fixed[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--fix {item!r}: expected NAME=NUMBER") from None
    if a.history:  # a history that does not read stops the command before the fit
        from gpucap.calibration.history import append_history, history_path, read_history

        read_history(history_path(a.history))
    cases, _ = read_calibration_cases(a)
    run = parallel_runner(a)
    # the files a fit is traced to: result files and manifests (what was read), not everything
    # beside them (a checkpoint in the same folder is neither read nor hashed)
    from gpucap.calibration.manifests import MANIFEST_NAMES
    from gpucap.calibration.results import SUFFIXES

    sources = [
        str(p)
        for arg in a.results
        for p in ([Path(arg)] if Path(arg).is_file() else sorted(Path(arg).rglob("*")))
        if p.is_file() and (p.suffix.lower() in SUFFIXES or p.name in MANIFEST_NAMES)
    ]
    settings = dict(
        fixed=fixed,
        targets=targets,
        slo=SLO(**values(a, SLO)),
        intervals=a.intervals,
        n_jobs=run,
        **values(a, FitSettings),
        progress=run.progress,
    )
    if a.step_log:
        from gpucap.calibration.promptsteps import calibrate_with_prompt_steps
        from gpucap.telemetry.steplog import read_step_log

        results = [p for p in sources if p.lower().endswith(".json") and Path(p).name not in MANIFEST_NAMES]
        free = settings.pop("free")
        with_steps = calibrate_with_prompt_steps(
            cases, read_step_log(a.step_log), results, free=free, sources=[*sources, a.step_log], **settings
        )
        print(with_steps.report().splitlines()[0], file=sys.stderr)
        fit = with_steps.fit
    else:
        fit = calibrate(cases, sources=sources, **settings)
    if not fit.success and not a.save_unconverged:
        print(fit.report())
        raise ValueError(f"the fit did not converge ({fit.message}); nothing written (--save-unconverged saves it)")
    fit.save(out, overwrite=a.overwrite)
    if a.history:
        print(f"appended to {append_history(fit, a.history, label=a.label)}", file=sys.stderr)
    if a.json:
        print(json.dumps(fit.to_dict(), indent=2))
        return 0
    print(fit.report())
    print(f"\nmedian absolute error by model size, default -> calibrated coefficients ({a.method}):")
    table = error_table(cases, fit.coefficients, by="size", method=a.method, n_jobs=run)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    for line in fit.provenance.get("not_sweeps", []):
        print(f"no limit: {line}")
    print(f"\nwrote {out}")
    return 0
