"""Sourced fixes to a cases table: where a row's cell disagrees with its own source, a corrections
file gives the value the source prints, and ``apply_corrections`` puts it in a copy of the table.

A corrections file is a CSV with one fix per row: ``case_id``, ``column``, ``value`` (the
corrected cell), ``stated`` (the cell as the cases file has it: a fix whose ``stated`` no longer
matches is refused, so fixes never land on another version of the file), ``source`` and
``reason`` (where the value is printed, and why the stated one is wrong). The project's own,
``data/measured-corrections.csv``, gives the mean output of GPUStack's random-length runs: their
``vllm bench serve`` commands set no ``--ignore-eos``, so requests stopped at the end of a sequence
and the run's "Total generated tokens" over its requests falls short of the ``osl`` asked for
(gpt-oss's 4,000/200 runs made 105-134 tokens a request).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from gpucap.calibration.cases import read_table
from gpucap.catalog.gpus import DATA_DIR

CORRECTION_COLUMNS = ("case_id", "column", "value", "stated", "source", "reason")
PROJECT_CORRECTIONS = DATA_DIR / "measured-corrections.csv"


def read_corrections(path: str | Path) -> pd.DataFrame:
    """Read a corrections CSV (``CORRECTION_COLUMNS``, every cell filled), as text."""
    path = Path(path)
    df = read_table(path, "corrections file", CORRECTION_COLUMNS, dtype=str, keep_default_na=False)
    for i, row in df.iterrows():
        empty = [c for c in CORRECTION_COLUMNS if not str(row[c]).strip()]
        if empty:
            raise ValueError(f"corrections file {path}, row {int(str(i)) + 2}: {', '.join(empty)} empty")
    return df


def _same(cell: object, stated: str) -> bool:
    """Whether a cases cell equals the text a correction states (numbers compared as numbers)."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return False  # an empty cell matches no stated value (read_corrections refuses empty ones)
    try:
        return math.isclose(float(str(cell)), float(stated), rel_tol=1e-9)
    except ValueError:
        return str(cell) == stated


def apply_corrections(cases: pd.DataFrame, corrections: pd.DataFrame, where: str = "corrections") -> pd.DataFrame:
    """A copy of ``cases`` with each correction's ``value`` in its (``case_id``, ``column``) cell,
    and a ``corrected`` column naming what changed on each row ("osl 200 -> 104.62"). A case or
    column the table lacks, or a cell that no longer reads ``stated``, is an error naming the
    correction (``where``: the file) and what the cell holds."""
    out = cases.copy()
    ids = out["case_id"].astype(str)
    index = {c: i for i, c in zip(out.index, ids, strict=True)}
    changed: dict[object, list[str]] = {}
    for n, fix in enumerate(corrections.itertuples(index=False), start=2):
        case, col, value, stated = str(fix.case_id), str(fix.column), str(fix.value), str(fix.stated)
        if case not in index:
            raise ValueError(f"{where}, row {n}: case {case!r} is not in the cases table")
        if (ids == case).sum() > 1:
            raise ValueError(
                f"{where}, row {n}: case {case!r} is on several rows of the cases table; give each its own id"
            )
        if col not in out.columns:
            raise ValueError(f"{where}, row {n}: the cases table has no column {col!r}")
        i = index[case]
        if not _same(out.at[i, col], stated):
            raise ValueError(
                f"{where}, row {n}: {case} {col} reads {out.at[i, col]}, not the stated {stated}; "
                "the corrections were made for another version of the cases file"
            )
        numeric = pd.api.types.is_numeric_dtype(out[col])
        try:
            new: object = float(value) if numeric else value
        except ValueError:
            raise ValueError(f"{where}, row {n}: value {value!r} for {col} is not a number") from None
        if numeric and not pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].astype(float)  # a whole-number column takes a mean like 104.62
        out.at[i, col] = new
        changed.setdefault(i, []).append(f"{col} {stated} -> {value}")
    out["corrected"] = ["; ".join(changed.get(i, [])) for i in out.index]
    return out


def read_public(path: str | Path, public: Path, corrections: str | Path | None = None) -> pd.DataFrame:
    """The cases of ``path`` with sourced fixes applied: the file ``corrections`` names, else the
    project's own (``PROJECT_CORRECTIONS``) when ``path`` is the public set ``public``, else none.
    What the benchmark scripts read; a message says how many rows were corrected."""
    from gpucap.calibration.validate import read_cases

    cases = read_cases(path)
    fixes = corrections or (PROJECT_CORRECTIONS if Path(path).resolve() == public.resolve() else None)
    if not fixes:
        return cases
    cases = apply_corrections(cases, read_corrections(fixes), where=str(fixes))
    print(f"{fixes}: {int((cases['corrected'] != '').sum())} rows corrected")
    return cases
