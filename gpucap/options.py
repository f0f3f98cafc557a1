"""A config field that carries what it takes to offer it to a user: its help, its command-line
flag, the kind of value it takes and its choices, and for a page its label, bounds and widget.
The config objects (``gpucap.config``) declare their inputs once with ``option``; the command line
builds its options from them (``gpucap.cli.fields``) and the estimator page its controls
(``gpucap.app.controls.field_control``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# what a value is, as the command line parses it
KINDS = (
    "str",
    "float",  # any finite number
    "positive_float",
    "positive_int",
    "switch",  # a bool that is False unless its flag is given
    "no_switch",  # a bool that is True unless its flag (--no-...) is given
    "image_size",  # a side (1344) or height x width (1080x1920), pixels
    "count",  # a whole number >= 0
    "non_negative_float",
    "names",  # a comma-separated list of words: a,b,c
    "positive_ints",  # a comma-separated list of whole numbers >= 1: 1,2,4,8
    "int",  # any whole number
    "duration",  # 5s, 10m, 1h or 300 (seconds), as seconds > 0
)
# how a page offers a number: a box for whole numbers, a box for any number, a slider
WIDGETS = ("int", "float", "slider")


@dataclass(frozen=True)
class Control:
    """How a page offers a field: the ``label`` beside its control, the ``bounds`` (lowest,
    highest) a number's control takes, the ``widget`` for a number (``WIDGETS``; default a box,
    for whole numbers where the field's kind is one) and what the page shows for each of its
    choices (``choice_labels``)."""

    label: str
    bounds: tuple[float, float] | None = None
    widget: str | None = None
    choice_labels: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.widget not in (None, *WIDGETS):
            raise ValueError(f"widget must be one of {', '.join(WIDGETS)}, got {self.widget!r}")
        if self.bounds is not None and not self.bounds[0] <= self.bounds[1]:
            raise ValueError(f"bounds must be (lowest, highest) with lowest <= highest, got {self.bounds!r}")


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    kind: str = "str",
    flag: str | None = None,
    choices: Sequence[str] | None = None,
    metavar: str | None = None,
    nargs: str | None = None,
    page: Control | None = None,
) -> Any:
    """``dataclasses.field(default=default)`` with the field's ``help``, ``kind`` (``KINDS``),
    command-line ``flag`` (default ``--`` and the name with dashes; ``""``: a positional
    argument), ``choices``, the ``metavar`` its help shows and ``nargs`` (``"?"``, ``"+"`` for a
    positional argument; ``"append"`` for a flag that may be given again, each value kept) in its
    metadata, and how a page offers it (``page``, a ``Control``; None: not on a page). A field
    without a default is required."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if nargs not in (None, "?", "+", "append"):
        raise ValueError(f"nargs must be None, '?', '+' or 'append', got {nargs!r}")
    meta = {
        "help": help,
        "kind": kind,
        "flag": flag,
        "choices": tuple(choices) if choices is not None else None,
        "metavar": metavar,
        "nargs": nargs,
        "page": page,
    }
    return dataclasses.field(default=default, metadata={"option": meta})


def options_of(cls: type) -> dict[str, dict[str, Any]]:
    """``{field name: its option metadata}`` of a dataclass, in field order, for the fields
    declared with ``option``."""
    return {f.name: dict(f.metadata["option"]) for f in dataclasses.fields(cls) if "option" in f.metadata}


def route(knobs: dict[str, Any], *classes: type) -> list[dict[str, Any]]:
    """``knobs`` split by the config class whose field each names (the first of ``classes`` that
    has it), one dict per class; a name no class has raises ``TypeError`` listing those that
    are."""
    fields = [{f.name for f in dataclasses.fields(cls)} for cls in classes]
    out: list[dict[str, Any]] = [{} for _ in classes]
    for name, value in knobs.items():
        k = next((i for i, names in enumerate(fields) if name in names), None)
        if k is None:
            known = sorted(set().union(*fields))
            raise TypeError(f"unknown keyword {name!r}; the knobs are {', '.join(known)}")
        out[k][name] = value
    return out
