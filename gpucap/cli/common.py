"""Options several commands share, declared once as fields (``gpucap.options.option``) and
offered through ``gpucap.cli.fields.add_options``: how a command reports, where its long jobs run,
the coefficients it starts from, the history a fit joins, the prices it counts and the KV budget
it is told."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from gpucap.cli.fields import add_options
from gpucap.options import option


@dataclass(frozen=True)
class Report:
    """How a command prints its answer."""

    json: bool = option(False, kind="switch", help="print the answer as JSON")


@dataclass(frozen=True)
class CoefficientsFile:
    """The coefficients a command predicts with."""

    coefficients: str | None = option(None, help="a calibration JSON (default: the engine's own coefficients)")


@dataclass(frozen=True)
class Parallel:
    """Where a command's independent tasks run (``gpucap.parallel``)."""

    jobs: int | None = option(None, kind="positive_int", help="processes (default: every core; 1: serially)")
    dask: str | None = option(
        None, metavar="ADDRESS", help="run on the Dask cluster whose scheduler is at ADDRESS (or set GPUCAP_DASK)"
    )
    quiet: bool = option(False, kind="switch", help="no progress bar")


@dataclass(frozen=True)
class History:
    """The calibration history a fit is appended to (``gpucap.calibration.history``)."""

    history: str | None = option(
        None, help="also append this fit to a calibration history (a JSON-lines file, or a folder that holds one)"
    )
    label: str = option("", help="a name for this fit in the history (e.g. the load test's date)")


@dataclass(frozen=True)
class Prices:
    """What GPU time costs (``gpucap.catalog.prices``)."""

    price: str | None = option(None, help="CSV gpu,usd_per_gpu_hour (default data/prices.csv)")
    usd_per_kwh: float | None = option(
        None,
        kind="non_negative_float",
        help="owned hardware: count power at each GPU's TDP (plus --price, read as amortized cost, if given)",
    )


@dataclass(frozen=True)
class KvBudget:
    """A KV cache budget given outright, as vLLM's ``--kv-cache-memory``."""

    kv_cache_memory: float | None = option(None, kind="positive_float", help="KV budget per GPU, GiB")


@dataclass(frozen=True)
class OutputFile:
    """A file a command writes, never over one that exists unless told."""

    out: str = option(help="the file to write (never overwritten unless --overwrite)")
    overwrite: bool = option(False, kind="switch", help="replace --out if it exists")


def add_json(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--json``: print ``what`` as JSON instead of the text report."""
    add_options(p, Report, helps={"json": f"print {what or 'the answer'} as JSON"})


def add_coefficients(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--coefficients``: a calibration JSON whose coefficients replace the engine's defaults
    (``what``: what this command does with them, when more than that)."""
    add_options(p, CoefficientsFile, helps={"coefficients": what} if what else None)


def add_parallel(p: argparse.ArgumentParser, what: str) -> None:
    """``--jobs``, ``--dask`` and ``--quiet``: where ``what`` runs."""
    add_options(
        p,
        Parallel,
        helps={
            "jobs": f"processes for {what} (default: every core; 1: serially)",
            "dask": f"run {what} on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786; or set GPUCAP_DASK)",
        },
    )


def parallel_runner(a: argparse.Namespace) -> Any:
    """The ``gpucap.parallel.Runner`` of ``add_parallel``'s options: a progress bar on a terminal
    unless ``--quiet`` or ``--json``."""
    import sys

    from gpucap.parallel import runner

    show = not a.quiet and not getattr(a, "json", False) and sys.stderr.isatty()
    return runner(a.jobs, a.dask, progress=show)
