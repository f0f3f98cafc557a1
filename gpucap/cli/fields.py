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
    duration_s,
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
    "int": int,
    "duration": duration_s,
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
        kind, text = meta["kind"], (helps or {}).get(name, meta["help"]).replace("%", "%%")  # argparse formats help
        if meta["flag"] == "":  # positional: its name is its dest
            shown = {"nargs": meta["nargs"]} if meta["nargs"] else {}
            parser.add_argument(name, type=PARSERS[kind], help=text, **shown, **_given(meta, default))
            continue
        flags = [flag_of(name, meta), *((aliases or {}).get(name, ()))]
        if kind in ("switch", "no_switch"):
            action = "store_true" if kind == "switch" else "store_false"
            parser.add_argument(*flags, dest=name, action=action, help=text)
            continue
        allowed = (choices or {}).get(name, meta["choices"])
        how: dict[str, Any] = {"action": "append"} if meta["nargs"] == "append" else {}
        if default is _REQUIRED:
            how["required"] = True
        else:
            how["default"] = None if meta["nargs"] == "append" else default
        parser.add_argument(*flags, dest=name, type=PARSERS[kind], choices=allowed, help=text, **how, **_given(meta))


def _given(meta: Mapping[str, Any], default: Any = None) -> dict[str, Any]:
    """The metavar a field's help shows, when it names one, and a positional's default."""
    out: dict[str, Any] = {"metavar": meta["metavar"]} if meta["metavar"] else {}
    if meta["flag"] == "" and meta["nargs"] == "?" and default is not _REQUIRED:
        out["default"] = default
    return out


def values(args: argparse.Namespace, cls: type, names: Iterable[str] | None = None) -> dict[str, Any]:
    """``{name: value}`` of the options ``add_options`` added for ``cls`` (the same ``names``),
    as keywords of the config object."""
    declared = options_of(cls)
    out = {name: getattr(args, name) for name in (declared if names is None else names)}
    for name in out:  # a flag given again and again: every value, in order (none: an empty tuple)
        if declared[name]["nargs"] in ("append", "+"):
            out[name] = tuple(out[name] or ())
    return out


_REQUIRED = object()


def _field_default(cls: type, name: str) -> Any:
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return _REQUIRED if f.default is dataclasses.MISSING else f.default
