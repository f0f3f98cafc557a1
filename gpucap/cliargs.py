"""Argument types of the command line: each turns a string into a checked value or raises
``argparse.ArgumentTypeError`` with one line saying what is wrong."""

from __future__ import annotations

import argparse
from collections.abc import Callable


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
