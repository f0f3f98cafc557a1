"""Error tables: measured vs predicted by model size, GPU and engine, with the default
coefficients, after calibration, and held out: a fit without a model, a source, or, within one
testbed (one lab's GPUs of one type under one engine), without a sweep, a load mode or a model,
predicting what it left out. The held-out variants within a testbed are the test of a
recalibration: does a fit on this week's load test predict next week's at another load level,
in another load mode, for another model on the same machines?"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from gpucap.calibration.accuracy import error_summary
from gpucap.calibration.calibrate import DEFAULT_FREE, calibrate
from gpucap.calibration.cases import testbed_keys
from gpucap.calibration.limits import sweep_labels
from gpucap.calibration.validate import METRICS, validate
from gpucap.catalog.lookup import load_model
from gpucap.parallel import Runner, as_runner
from gpucap.physics.coefficients import Coefficients
from gpucap.types import ENGINES

SIZE_BUCKETS = ((10e9, "<10B"), (40e9, "10-40B"), (100e9, "40-100B"), (np.inf, ">100B"))


def size_bucket(model: str) -> str:
    """Active parameters per token, bucketed: what sets decode cost."""
    try:
        active = load_model(model).active_params
    except ValueError:
        return "unknown"
    return next(name for top, name in SIZE_BUCKETS if active < top)


def _summary(result: pd.DataFrame, by: str, label: str) -> pd.DataFrame:
    rows = []
    for key, g in result.groupby(by):
        for m in METRICS:
            r = g[f"{m}_ratio"].dropna().astype(float)
            if not r.empty:
                rows.append(
                    {
                        by: key,
                        "metric": m,
                        f"n_{label}": len(r),
                        f"median_abs_err_{label}": float((r - 1).abs().median()),
                    }
                )
    return pd.DataFrame(rows)


def error_table(
    cases: pd.DataFrame,
    after: Coefficients | dict[str, Coefficients] | None,
    *,
    by: str = "size",
    before: Coefficients | dict[str, Coefficients] | None = None,
    method: str = "simulate",
    n_jobs: int | Runner | None = None,
) -> pd.DataFrame:
    """Median absolute error per group of ``by`` ("size", "gpu", "engine", "model") and metric,
    with ``before`` (default: each engine's defaults) and ``after`` coefficients side by side;
    each case predicted by ``method`` (``gpucap.calibration.validate.predict_prepared``; simulated
    runs on ``n_jobs``, ``gpucap.parallel``)."""
    run = as_runner(n_jobs)
    res_before = validate(cases, before, method=method, n_jobs=run)
    res_after = validate(cases, after, method=method, n_jobs=run)
    for res in (res_before, res_after):
        res["size"] = [size_bucket(str(m)) for m in res["model"]]
    table = _summary(res_before, by, "before").merge(_summary(res_after, by, "after"), on=[by, "metric"], how="outer")
    return table[[by, "metric", "n_before", "median_abs_err_before", "median_abs_err_after"]].rename(
        columns={"n_before": "n"}
    )


def leave_one_model_out(cases: pd.DataFrame, *, free: tuple[str, ...] = DEFAULT_FREE, **fit: Any) -> pd.DataFrame:
    """For each model: fit on every other model's runs, predict this model's, so the error quoted
    is for a model the fit did not see. One row per case and metric with the ratio predicted /
    measured under the defaults, under one fit on all runs (in sample), and held out;
    ``lomo_summary`` turns it into median errors."""
    all_fit = calibrate(cases, free=free, **fit).coefficients
    cases = cases.reset_index(drop=True)
    defaults, in_sample = validate(cases), validate(cases, all_fit)
    held_out = defaults.copy()
    for model in sorted(cases["model"].astype(str).unique()):
        held = (cases["model"].astype(str) == model).to_numpy()
        if held.all():
            continue
        coef = calibrate(cases[~held], free=free, **fit).coefficients
        held_out.loc[held, [f"{m}_ratio" for m in METRICS]] = validate(cases[held], coef)[
            [f"{m}_ratio" for m in METRICS]
        ].to_numpy()
    rows = []
    for m in METRICS:
        for k in range(len(cases)):
            if pd.notna(defaults.loc[k, f"{m}_ratio"]):
                rows.append(
                    {
                        "case_id": cases.loc[k, "case_id"] if "case_id" in cases else k,
                        "model": str(cases.loc[k, "model"]),
                        "size": size_bucket(str(cases.loc[k, "model"])),
                        "metric": m,
                        "ratio_default": defaults.loc[k, f"{m}_ratio"],
                        "ratio_in_sample": in_sample.loc[k, f"{m}_ratio"],
                        "ratio_held_out": held_out.loc[k, f"{m}_ratio"],
                    }
                )
    return pd.DataFrame(rows)


def lomo_summary(lomo: pd.DataFrame, by: tuple[str, ...] = ("metric", "size")) -> pd.DataFrame:
    """Median absolute error |ratio - 1| per group: defaults, in sample, held out."""
    cols = {
        "ratio_default": "median_abs_err_default",
        "ratio_in_sample": "median_abs_err_in_sample",
        "ratio_held_out": "median_abs_err_held_out",
    }
    err = lomo.assign(**{v: (lomo[k].astype(float) - 1).abs() for k, v in cols.items()})
    table = err.groupby(list(by))[list(cols.values())].median()
    table.insert(0, "n", err.groupby(list(by)).size())
    return table.reset_index()


VARIANTS = ("defaults", "fitted", "lomo", "loso", "losweep", "lomode", "lomo-testbed")
VARIANT_TEXT = {
    "defaults": "each engine's default coefficients",
    "fitted": "fitted on all rows (one fit per engine), in sample",
    "lomo": "leave one model out: each model predicted by a fit on the other models",
    "loso": "leave one source out: each source predicted by a fit on the other sources",
    "losweep": "leave one sweep out within its testbed: each sweep predicted by a fit on the testbed's other runs",
    "lomode": "leave one load mode out within its testbed: each mode's runs predicted by a fit on the testbed's other modes",
    "lomo-testbed": "leave one model out within its testbed: each model predicted by a fit on the testbed's other models",
}
# A testbed: one lab's GPUs of one type under one engine.
TESTBED = "source_id+gpu+engine"
# What each within-testbed variant holds out, and its name in a note.
WITHIN = {"losweep": ("sweep", "sweep"), "lomode": ("load_mode", "load mode"), "lomo-testbed": ("model", "model")}
GROUPS = ("size", "gpu", "engine", "source_id", "load_mode", "model")


def size_class(model: str) -> str:
    """``size_bucket`` of the active parameters, marked MoE for mixture-of-experts models (their
    total parameters set memory, their active ones the work per token)."""
    bucket = size_bucket(model)
    try:
        moe = load_model(model).is_moe
    except ValueError:
        return bucket
    return f"MoE {bucket} active" if moe else bucket


def _engines(cases: pd.DataFrame) -> pd.Series:
    """Each row's engine as the coefficients know it (NIM runs TensorRT-LLM)."""
    return cases["engine"].astype(str).str.lower().replace({"nim": "trtllm"})


def _engine_fit(
    engine: str,
    cases: pd.DataFrame,
    free: tuple[str, ...],
    method: str,
    within_ranges: bool,
    start: Coefficients | None = None,
    starts: int | None = None,
) -> tuple[Coefficients, list[str]]:
    """The fit on ``engine``'s rows of ``cases`` from ``start`` (default: the engine's defaults;
    ``starts`` as ``calibrate`` takes it) and its "missing mechanism" flags; the engine's
    defaults (no flags) where its rows cannot determine the coefficients."""
    rows = cases[(_engines(cases) == engine).to_numpy()]
    try:
        fit = calibrate(
            rows, start=start or Coefficients.for_engine(engine), free=free, method=method,
            within_ranges=within_ranges, compare_within=False, starts=starts, n_jobs=1,
        )  # fmt: skip
    except ValueError:
        return Coefficients.for_engine(engine), []
    return fit.coefficients, [f for f in fit.flags if f.startswith("missing mechanism")]


def _fits_per_engine(
    cases: pd.DataFrame,
    free: tuple[str, ...],
    method: str,
    within_ranges: bool = False,
    notes: list[str] | None = None,
    run: Runner | None = None,
) -> dict[str, Coefficients]:
    """One fit per engine on that engine's rows (one task each on ``run``); an engine whose rows
    cannot determine the coefficients keeps its defaults. Each fit's "missing mechanism" flags
    go to ``notes``."""
    engines = sorted(set(_engines(cases).unique()) & set(ENGINES))  # other engines keep their defaults
    task = partial(_engine_fit, cases=cases, free=free, method=method, within_ranges=within_ranges)
    fits = (run or Runner()).map(task, engines, desc="fits per engine", label=lambda _, e: f"the {e} fit")
    out = {}
    for engine, (coef, flags) in zip(engines, fits, strict=True):
        out[engine] = coef
        if notes is not None:
            notes += [f"{engine} fit: {f}" for f in flags]
    return out


def _engine_fit_without(
    job: tuple[str, str],
    cases: pd.DataFrame,
    key: str,
    free: tuple[str, ...],
    method: str,
    within_ranges: bool,
    fits: dict[str, Coefficients],
) -> tuple[Coefficients, list[str]]:
    """``_engine_fit`` of engine ``job[1]`` on the rows whose ``key`` is not ``job[0]``, started
    from that engine's fit on every row (``fits``), as ``calibrate``'s held-out refits start: the
    same minimum less one group's pull (one start)."""
    value, engine = job
    rest = cases[(cases[key].astype(str) != value).to_numpy()]
    return _engine_fit(engine, rest, free, method, within_ranges, fits.get(engine), starts=1)


def _held_out(
    cases: pd.DataFrame,
    key: str,
    free: tuple[str, ...],
    method: str,
    within_ranges: bool,
    run: Runner,
    fits: dict[str, Coefficients],
) -> pd.DataFrame:
    """Every row predicted by per-engine fits on the rows of the other values of ``key``.
    ``fits``: the per-engine fits on every row (``_fits_per_engine``). Leaving a value out
    changes only the fits of the engines its rows ran on; the other engines keep ``fits``, which
    is the same fit on the same rows. The refits run one task each on ``run``."""
    values = sorted(cases[key].astype(str).unique())
    engines = _engines(cases)
    labels = cases[key].astype(str)
    jobs = [(v, e) for v in values for e in sorted(set(engines[labels == v]) & set(ENGINES))]
    task = partial(
        _engine_fit_without, cases=cases, key=key, free=free, method=method, within_ranges=within_ranges, fits=fits
    )
    refits = run.map(task, jobs, desc=f"leave one {key} out", label=lambda _, j: f"the {j[1]} fit without {key} {j[0]}")
    parts = []
    for value in values:
        held = (labels == value).to_numpy()
        coef = {**fits, **{e: c for (v, e), (c, _) in zip(jobs, refits, strict=True) if v == value}}
        parts.append(validate(cases[held], coef, method=method, n_jobs=run).set_index(cases.index[held]))
    return pd.concat(parts).loc[cases.index]


def _held_out_within_part(
    job: tuple[str, str, np.ndarray],
    cases: pd.DataFrame,
    free: tuple[str, ...],
    method: str,
    within_ranges: bool,
) -> np.ndarray | str:
    """One (testbed, value, rows of the testbed held) job of ``_held_out_within``: the held rows'
    ``validate`` table as an array, or why they cannot be held out."""
    bed, _, held = job
    in_bed = np.array(testbed_keys(cases, TESTBED)) == bed
    engine = _engines(cases[in_bed]).iloc[0]
    start = Coefficients.for_engine(engine) if engine in ENGINES else None
    try:
        fit = calibrate(
            cases[in_bed & ~held], start=start, free=free, method=method, within_ranges=within_ranges,
            compare_within=False, starts=1,
        )  # fmt: skip
    except ValueError as exc:
        return str(exc)
    return validate(cases.iloc[np.flatnonzero(held)], fit.coefficients, method=method, n_jobs=1).to_numpy()


def _held_out_within(
    cases: pd.DataFrame,
    variant: str,
    free: tuple[str, ...],
    method: str,
    within_ranges: bool,
    notes: list[str],
    run: Runner,
) -> pd.DataFrame:
    """``variant`` (``WITHIN``): in every testbed (``TESTBED``) with two or more sweeps, load
    modes or models, each one's rows predicted by a fit on the testbed's other rows (one task
    per held-out group on ``run``). Rows that cannot be held out (their testbed has one, or the
    rest cannot determine the free coefficients) keep no prediction, and ``notes`` says why."""
    key, what = WITHIN[variant]
    beds = np.array(testbed_keys(cases, TESTBED))
    groups = np.array(sweep_labels(cases) if key == "sweep" else cases[key].astype(str).tolist())
    out = validate(cases, method=method, n_jobs=run)
    predicted = np.zeros(len(cases), dtype=bool)
    single = []
    jobs: list[tuple[str, str, np.ndarray]] = []
    for bed in sorted(set(beds)):
        in_bed = beds == bed
        values = sorted(set(groups[in_bed]))
        if len(values) < 2:
            single.append(bed)
            continue
        jobs += [(bed, value, in_bed & (groups == value)) for value in values]
    task = partial(_held_out_within_part, cases=cases, free=free, method=method, within_ranges=within_ranges)
    results = run.map(task, jobs, desc=f"{variant} fits", label=lambda _, j: f"{j[0]}, {what} {j[1][:60]}")
    for (bed, value, held), result in zip(jobs, results, strict=True):
        if isinstance(result, str):
            notes.append(f"{variant}: {bed}, {what} {value[:60]}: not held out ({result})")
            continue
        pos = np.flatnonzero(held)
        out.iloc[pos] = result
        predicted[pos] = True
    if single:
        notes.append(
            f"{variant}: {len(single)} testbed(s) with one {what} only, nothing to hold out: {'; '.join(single)}"
        )
    if not predicted.any():
        notes.append(f"{variant}: skipped, no testbed has two or more {what}s")
    cols = [c for c in out if c.endswith("_predicted") or c.endswith("_ratio")]
    out.loc[~predicted, cols] = np.nan
    return out


def error_tables(
    cases: pd.DataFrame,
    coefficients: Coefficients | dict[str, Coefficients] | None = None,
    *,
    by: tuple[str, ...] | list[str] = ("size",),
    variants: tuple[str, ...] | list[str] = ("defaults", "fitted"),
    free: tuple[str, ...] = DEFAULT_FREE,
    method: str = "closed-form",
    within_ranges: bool = False,
    n_jobs: int | Runner | None = None,
    dask: Any = None,
    progress: bool = False,
) -> pd.DataFrame:
    """The error tables a team pastes into a report: for every group of ``by`` (``size``: active
    parameters from the model specs, MoE marked; or any of gpu, engine, source_id, load_mode,
    model) and every variant (``VARIANT_TEXT``), per metric: rows compared, median and 90th
    percentile of ``|predicted / measured - 1|``, median ratio. ``coefficients`` given: they are
    the "fitted" variant; otherwise one fit per engine on all rows. Tidy: one row per (group,
    variant, metric). The held-out fits (one task per group held out) and simulated rows run on
    ``n_jobs`` processes (None: every core; 1: serially) or the Dask cluster ``dask``
    (``gpucap.parallel``); the table does not depend on where they ran."""
    by, variants = tuple(by), tuple(variants)
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ValueError(f"variants must be among {', '.join(VARIANTS)}, got {', '.join(variants) or 'none'}")
    unknown = [b for b in by if b not in GROUPS]
    if unknown or not by:
        raise ValueError(f"group rows by {', '.join(GROUPS)}; got {', '.join(by) or 'nothing'}")
    missing = [b for b in by if b not in ("size",) and b not in cases]
    if {"loso", *WITHIN} & set(variants) and "source_id" not in cases:
        missing.append("source_id (for loso and the within-testbed variants)")
    if missing:
        raise ValueError(f"the cases have no column {', '.join(missing)}")
    cases = cases.reset_index(drop=True)
    run = as_runner(n_jobs, dask, progress)
    results = {}
    notes: list[str] = []
    # one fit per engine on every row, done once: the "fitted" variant, and where lomo and loso start
    fits: dict[str, Coefficients] = {}
    fit_flags: list[str] = []
    if {"lomo", "loso"} & set(variants) or ("fitted" in variants and coefficients is None):
        fits = _fits_per_engine(cases, free, method, within_ranges, fit_flags, run)
    for v in variants:
        if v == "defaults":
            results[v] = validate(cases, method=method, n_jobs=run)
        elif v == "fitted":
            notes += fit_flags if coefficients is None else []
            results[v] = validate(cases, fits if coefficients is None else coefficients, method=method, n_jobs=run)
        elif v in WITHIN:
            results[v] = _held_out_within(cases, v, free, method, within_ranges, notes, run)
        else:
            key = "model" if v == "lomo" else "source_id"
            results[v] = _held_out(cases, key, free, method, within_ranges, run, fits)
    labels = {
        "size": [size_class(str(m)) for m in cases["model"]],
        **{b: cases[b].astype(str).tolist() for b in by if b != "size"},
    }
    parts = []
    for v, res in results.items():
        res = res.reset_index(drop=True).assign(**{b: labels[b] for b in by})
        key = res[list(by)].astype(str).agg(" | ".join, axis=1)
        summary = error_summary(res.assign(_group=key), "_group")
        if summary.empty:  # a held-out variant with nothing held out (its note says why)
            continue
        summary = summary[summary["metric"].isin(METRICS)]
        summary.insert(0, "variant", v)
        for j, b in enumerate(by):
            summary.insert(j, b, summary["_group"].str.split(" | ", regex=False).str[j])
        parts.append(summary.drop(columns="_group"))
    columns = [*by, "variant", "metric", "n", "median_abs_err", "p90_abs_err", "median_ratio"]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    table.attrs["notes"] = notes
    return table


def wide_error_table(table: pd.DataFrame) -> pd.DataFrame:
    """``error_tables`` as a report shows it: one row per group and variant, per metric the
    rows compared, median and p90 absolute error and median ratio."""
    by = [c for c in table.columns if c in GROUPS]
    wide = table.pivot_table(
        index=[*by, "variant"],
        columns="metric",
        values=["n", "median_abs_err", "p90_abs_err", "median_ratio"],
        aggfunc="first",
    )
    order = [(s, m) for m in METRICS for s in ("n", "median_abs_err", "p90_abs_err", "median_ratio") if (s, m) in wide]
    wide = wide[order]
    names = {"n": "n", "median_abs_err": "median |err|", "p90_abs_err": "p90 |err|", "median_ratio": "ratio"}
    wide.columns = [f"{m} {names[s]}" for s, m in wide.columns]
    sizes = [name for _, name in SIZE_BUCKETS]
    rank = {
        "variant": {v: k for k, v in enumerate(VARIANTS)},
        "size": {**{n: k for k, n in enumerate(sizes)}, **{f"MoE {n} active": 10 + k for k, n in enumerate(sizes)}},
    }
    wide = wide.reset_index()
    return wide.sort_values([*by, "variant"], key=lambda c: c.map(rank[c.name]).fillna(99) if c.name in rank else c)


def format_error_table(table: pd.DataFrame, fmt: str = "markdown") -> str:
    """``error_tables`` as text: ``markdown`` or ``html`` (wide, errors in percent) or ``csv``
    (tidy, fractions)."""
    if fmt == "csv":
        return table.to_csv(index=False)
    if table.empty:
        return "No rows: every variant asked for was skipped (the notes say why)."
    wide = wide_error_table(table)
    cells = wide.copy()
    for col in wide.columns:
        if col.endswith("|err|"):
            cells[col] = wide[col].map(lambda v: "" if pd.isna(v) else f"{v:.1%}")
        elif col.endswith("ratio"):
            cells[col] = wide[col].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
        elif col.endswith(" n"):
            cells[col] = wide[col].map(lambda v: "" if pd.isna(v) else f"{int(v)}")
    if fmt == "html":
        return cells.to_html(index=False)
    if fmt != "markdown":
        raise ValueError(f"format must be markdown, html or csv, got {fmt!r}")
    head = "| " + " | ".join(cells.columns) + " |"
    rule = "|" + "|".join("---" for _ in cells.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in cells.itertuples(index=False)]
    return "\n".join([head, rule, *body])
