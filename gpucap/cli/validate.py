"""``gpucap validate``: predict every case of a measurements CSV and compare."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucap.calibration.settings import FitSettings
from gpucap.cli.calibrate import add_gpu_file
from gpucap.cli.common import add_json, add_parallel, parallel_runner
from gpucap.cli.fields import add_options
from gpucap.config import Deployment
from gpucap.options import option


@dataclass(frozen=True)
class ValidateOptions:
    """``gpucap validate``'s own options: the cases, the fixes applied first, where the table goes."""

    cases: str = option(flag="", help="CSV in the schema of measured-public.csv")
    corrections: str | None = option(
        None,
        help="CSV of sourced fixes to apply first (case_id, column, value, stated, source, reason; "
        "the project's own for the public set: data/measured-corrections.csv)",
    )
    out: str | None = option(None, help="also write the per-row table as CSV here (never overwrites)")


def add_parser(sub: Any) -> None:
    v = sub.add_parser("validate", help="predict every case of a measurements CSV and compare")
    add_options(v, ValidateOptions, ("cases",))
    add_options(
        v, Deployment, ("gpu_file",), helps={"gpu_file": "CSV of extra GPUs (columns of data/gpus.csv) the cases name"}
    )
    add_options(v, ValidateOptions, ("corrections",))
    add_json(v, "the table, one object per row,")
    add_options(v, ValidateOptions, ("out",))
    add_options(
        v,
        FitSettings,
        ("method",),
        defaults={"method": "simulate"},
        helps={"method": "simulate each row's benchmark run (default) or use the closed forms (fast)"},
    )
    add_parallel(v, "the simulated rows")


def run(a: argparse.Namespace) -> int:
    import pandas as pd

    from gpucap.calibration.accuracy import error_summary
    from gpucap.calibration.corrections import apply_corrections, read_corrections
    from gpucap.calibration.validate import read_cases, validate

    out = Path(a.out) if a.out else None
    if out is not None and out.exists():
        raise ValueError(f"{out} exists; choose another --out (results are never overwritten)")
    run = parallel_runner(a)  # a cluster that does not answer stops the command before any work
    add_gpu_file(a)
    cases = read_cases(a.cases)
    if a.corrections:
        cases = apply_corrections(cases, read_corrections(a.corrections), where=a.corrections)
    result = validate(cases, method=a.method, n_jobs=run)
    if out is not None:
        result.to_csv(out, index=False)
    if a.json:
        rows = []
        for _, r in result.iterrows():
            if isinstance(r["error"], str):
                rows.append({"case_id": r["case_id"], "error": r["error"]})
            else:
                rows.append(
                    {
                        "case_id": r["case_id"],
                        **{
                            m: (None if pd.isna(r[f"{m}_predicted"]) else float(r[f"{m}_predicted"]))
                            for m in ("output_tok_s", "ttft_ms", "tpot_ms")
                        },
                    }
                )
        print(json.dumps(rows, indent=1))
        return 0
    ok = result["error"].isna()
    print(f"{int(ok.sum())} of {len(result)} rows predicted")
    for _, r in result[~ok].iterrows():
        print(f"  not predicted: {r['case_id']} ({r['model']} on {r['gpu']}): {r['error']}")
    print("\nabsolute error |predicted / measured - 1|:")
    print(error_summary(result).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    for by in ("engine", "gpu", "model"):
        s = error_summary(result, by)
        s = s[s["metric"] == "output_tok_s"]
        print(f"\noutput tokens/s by {by}:")
        print(s.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0
