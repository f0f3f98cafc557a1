"""Argument types of the command line: each turns a string into a checked value or raises
``argparse.ArgumentTypeError`` with one line saying what is wrong."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def whole(least: int) -> Callable[[str], int]:
    """An integer of at least ``least``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"{v} must be at least {least}")
        return v

    return parse


positive_int = whole(1)
count = whole(0)


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive finite number")
    return v


def non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number >= 0")
    return v


def names(text: str) -> list[str]:
    """``a,b,c``: a non-empty comma-separated list."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r} names nothing; give a comma-separated list")
    return items


def positive_ints(text: str) -> list[int]:
    """``1,2,4,8``: whole numbers of at least 1."""
    try:
        return [positive_int(t) for t in names(text)]
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None


def output_file(path: str, *, overwrite: bool, inputs: Sequence[str] = ()) -> Path:
    """A file the command will write, checked before any work: its folder exists, it is not a
    folder or a link (a dangling link would be written through), it is not one of ``inputs``,
    and it does not exist unless ``overwrite``. Raises ValueError naming what is wrong."""
    out = Path(path)
    if out.is_symlink():
        raise ValueError(f"--out {out} is a symbolic link; give the file itself")
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give a file name in it")
    if not out.parent.is_dir():
        raise ValueError(f"--out {out}: the folder {out.parent} does not exist (or is not a folder)")
    if out.exists() and not overwrite:
        raise ValueError(f"{out} exists; choose another --out or pass --overwrite")
    resolved = out.resolve()
    for item in inputs:
        p = Path(item).resolve()
        if resolved == p or (p.is_dir() and resolved.is_relative_to(p) and out.exists()):
            raise ValueError(f"--out {out} is one of the inputs; write the result elsewhere")
    return out


def add_json(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--json``: print ``what`` as JSON instead of the text report."""
    p.add_argument("--json", action="store_true", help=f"print {what or 'the answer'} as JSON")


def add_coefficients(p: argparse.ArgumentParser, what: str = "") -> None:
    """``--coefficients``: a calibration JSON whose coefficients replace the engine's defaults
    (``what``: what this command does with them, when more than that)."""
    p.add_argument(
        "--coefficients", default=None, help=what or "a calibration JSON (default: the engine's own coefficients)"
    )


def add_parallel(p: argparse.ArgumentParser, what: str) -> None:
    """``--jobs``, ``--dask`` and ``--quiet``: where ``what`` runs (``gpucap.parallel``)."""
    p.add_argument(
        "--jobs", type=positive_int, default=None, help=f"processes for {what} (default: every core; 1: serially)"
    )
    p.add_argument(
        "--dask",
        default=None,
        metavar="ADDRESS",
        help=f"run {what} on the Dask cluster whose scheduler is at ADDRESS (tcp://host:8786; or set GPUCAP_DASK)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def parallel_runner(a: argparse.Namespace) -> Any:
    """The ``gpucap.parallel.Runner`` of ``add_parallel``'s options: a progress bar on a terminal
    unless ``--quiet`` or ``--json``."""
    import sys

    from gpucap.parallel import runner

    show = not a.quiet and not getattr(a, "json", False) and sys.stderr.isatty()
    return runner(a.jobs, a.dask, progress=show)


def finite_float(text: str) -> float:
    """Any finite number."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number")
    return v


def image_size(text: str) -> int | tuple[int, int]:
    """``1344`` (a square side) or ``1080x1920`` (height x width), pixels."""
    try:
        parts = [int(p) for p in text.lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an image size; give a side like 1344 or HxW like 1080x1920")
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])
