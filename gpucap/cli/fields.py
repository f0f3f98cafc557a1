"""Command-line options made from the config objects' fields (``gpucap.options.option``): each
field's flag, help, kind and choices are declared once, on the field, and a command offers the
fields it takes by name. ``values`` reads them back as keywords of the config object."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpucap.cli.args import (
    count,
    finite_float,
    image_size,
    names,
    non_negative_float,
    positive_float,
    positive_int,
    positive_ints,
)
from gpucap.options import options_of

PARSERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "float": finite_float,
    "positive_float": positive_float,
    "positive_int": positive_int,
    "image_size": image_size,
    "count": count,
    "non_negative_float": non_negative_float,
    "names": lambda text: tuple(names(text)),
    "positive_ints": lambda text: tuple(positive_ints(text)),
}


def flag_of(name: str, meta: Mapping[str, Any]) -> str:
    """The field's flag: its own, or ``--`` and the name with dashes (``--no-`` for a field that
    is on unless turned off)."""
    if meta["flag"]:
        return str(meta["flag"])
    dashed = name.replace("_", "-")
    return f"--no-{dashed}" if meta["kind"] == "no_switch" else f"--{dashed}"


def add_options(
    parser: argparse.ArgumentParser | Any,
    cls: type,
    names: Iterable[str] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    choices: Mapping[str, Sequence[str] | None] | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
    helps: Mapping[str, str] | None = None,
) -> None:
    """Add an option to ``parser`` for each of ``names`` (default: every field of ``cls``
    declared with ``option``, so that a field added there is offered here). A command may narrow
    a field: ``defaults`` (None: given or not, the command decides), ``choices``, other flags
    that also set it (``aliases``) and its ``helps``; a choice of None lets any value through."""
    declared = options_of(cls)
    for name in declared if names is None else names:
        if name not in declared:
            raise KeyError(f"{cls.__name__}.{name} is not declared with gpucap.options.option")
        meta = declared[name]
        default = _field_default(cls, name)
        if defaults and name in defaults:
            default = defaults[name]
        flags = [flag_of(name, meta), *((aliases or {}).get(name, ()))]
        kind, text = meta["kind"], (helps or {}).get(name, meta["help"]).replace("%", "%%")  # argparse formats help
        allowed = (choices or {}).get(name, meta["choices"])
        if kind == "switch":
            parser.add_argument(*flags, dest=name, action="store_true", help=text)
        elif kind == "no_switch":
            parser.add_argument(*flags, dest=name, action="store_false", help=text)
        elif default is _REQUIRED:
            parser.add_argument(*flags, dest=name, type=PARSERS[kind], choices=allowed, required=True, help=text)
        else:
            parser.add_argument(*flags, dest=name, type=PARSERS[kind], choices=allowed, default=default, help=text)


def values(args: argparse.Namespace, cls: type, names: Iterable[str] | None = None) -> dict[str, Any]:
    """``{name: value}`` of the options ``add_options`` added for ``cls`` (the same ``names``),
    as keywords of the config object."""
    return {name: getattr(args, name) for name in (options_of(cls) if names is None else names)}


_REQUIRED = object()


def _field_default(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return _REQUIRED if f.default is dataclasses.MISSING else f.default
