"""``gpucap errors``: error tables, measured against predicted, by model size, GPU, engine, source."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from gpucap.calibration.analysis import GROUPS
from gpucap.calibration.settings import FitSettings
from gpucap.cli.calibrate import read_calibration_cases, results_options
from gpucap.cli.common import add_coefficients, add_parallel, parallel_runner
from gpucap.cli.fields import add_options, values
from gpucap.options import option


@dataclass(frozen=True)
class ErrorsOptions:
    """``gpucap errors``' own options: what is read, how rows are grouped, which variants."""

    cases: str = option(
        flag="", help="a cases CSV (the schema of measured-public.csv) or load-test results (files, folder)"
    )
    by: str = option("size", help=f"group rows by, comma-separated: {', '.join(GROUPS)}")
    variants: str = option(
        "defaults,fitted",
        help="comma-separated: defaults, fitted, lomo (leave one model out), loso (leave one source out); within each "
        "testbed (source, GPU, engine): losweep (leave one sweep out), lomode (leave one load mode out), "
        "lomo-testbed (leave one model out)",
    )
    format: str = option("markdown", choices=("markdown", "html", "csv"), help="how the tables are printed")


def add_parser(sub: Any) -> None:
    e = sub.add_parser("errors", help="error tables: measured vs predicted by model size, GPU, engine, source")
    add_options(e, ErrorsOptions, ("cases",))
    add_coefficients(e, "a calibration JSON: the 'fitted' variant (default: fit here)")
    add_options(e, ErrorsOptions, ("by", "variants", "format"))
    add_options(
        e,
        FitSettings,
        ("free", "method", "within_ranges"),
        helps={"free": "coefficients the fits free, comma-separated", "method": "how each row is predicted"},
    )
    results_options(e)
    add_parallel(e, "the held-out fits and simulated rows")


def run(a: argparse.Namespace) -> int:
    from gpucap.calibration.analysis import error_tables, format_error_table
    from gpucap.physics.coefficients import Coefficients

    a.results = [a.cases]
    cases, _ = read_calibration_cases(a)
    coef = Coefficients.from_file(a.coefficients) if a.coefficients else None
    table = error_tables(
        cases,
        coef,
        by=tuple(b.strip() for b in a.by.split(",") if b.strip()),
        variants=tuple(v.strip() for v in a.variants.split(",") if v.strip()),
        **values(a, FitSettings, ("free", "method", "within_ranges")),
        n_jobs=parallel_runner(a),
    )
    print(format_error_table(table, a.format))
    notes = table.attrs.get("notes", [])
    if notes:
        print(
            "\n".join(["", "Notes:", *(f"- {n}" for n in notes)]), file=sys.stderr if a.format == "csv" else sys.stdout
        )
    return 0
