"""Argument types of the command line: each turns a string into a checked value or raises
``argparse.ArgumentTypeError`` with one line saying what is wrong."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from pathlib import Path


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


def _number(text: str) -> float:
    """``text`` as a float, or the error saying it is not a number."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    v = _number(text)
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive finite number")
    return v


def non_negative_float(text: str) -> float:
    v = _number(text)
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


def finite_float(text: str) -> float:
    """Any finite number."""
    v = _number(text)
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


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def duration_s(text: str) -> float:
    """``5s``, ``10m``, ``1h``, ``300`` (seconds) as seconds > 0."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; give e.g. 5s, 10m, 1h or 300 (seconds)")
    return float(m.group(1)) * _UNIT_S[m.group(2)]
