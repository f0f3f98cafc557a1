"""Typed reads of a model's ``config.json``: every field the parser uses has a type and a range,
and a value outside them is one line naming the file, the key, the value and what is expected.
A key the parser does not read is never looked at."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar, cast

# Whole numbers beyond these are not a model's: they would only make the parser allocate without
# bound (a layer list of 10^12 entries). Other whole numbers stop at 2^31.
COUNT_CAPS = {"num_hidden_layers": 10_000, "n_layer": 10_000, "depth": 10_000}
INT_CAP = 2**31 - 1

T = TypeVar("T")


def show_value(v: Any) -> str:
    """A value for an error message, cut to a readable length."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 200:
        return f"{str(v)[:12]}... ({len(str(v))} digits)"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


class Fields:
    """The keys of one config section (``cfg``), read with their types; ``where`` names the file
    (and the section) in errors."""

    def __init__(self, cfg: Mapping[str, Any], where: str) -> None:
        if not isinstance(cfg, Mapping):
            raise ValueError(f"{where}: expected a JSON object of fields, got {type(cfg).__name__}")
        self.cfg, self.where = cfg, where

    def _pick(self, keys: tuple[str, ...]) -> tuple[str, Any]:
        for k in keys:
            if self.cfg.get(k) is not None:
                return k, self.cfg[k]
        return keys[0], None

    def has(self, *keys: str) -> bool:
        return self._pick(keys)[1] is not None

    def bad(self, key: str, value: Any, expected: str) -> ValueError:
        return ValueError(f"{self.where}: {key} = {show_value(value)} is not {expected}")

    def count(self, *keys: str, default: int | None = None, least: int = 1) -> int:
        """A whole number >= ``least`` (JSON integers, or floats like 4.0); ``default`` when the
        keys are absent or null (a missing required key is the caller's error)."""
        key, v = self._pick(keys)
        if v is None:
            if default is None:
                raise ValueError(f"{self.where}: {key} is missing")
            return default
        if isinstance(v, int) and not isinstance(v, bool):
            ok = True
        else:
            ok = isinstance(v, float) and math.isfinite(v) and v.is_integer()
        cap = COUNT_CAPS.get(key, INT_CAP)
        if not ok or not least <= v <= cap:
            rng = f"a whole number >= {least}" + (f" and <= {cap:,}" if ok and v > cap else "")
            raise self.bad(key, v, rng)
        return int(v)

    def number(self, *keys: str, default: float, low: float = 0.0, high: float = math.inf) -> float:
        """A finite number in (low, high]."""
        key, v = self._pick(keys)
        if v is None:
            return default
        try:
            finite = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(float(v))
        except OverflowError:  # an integer of hundreds of digits
            finite = False
        if not finite or not low < v <= high:
            raise self.bad(key, v, f"a number in ({low:g}, {high:g}]")
        return float(v)

    def _typed(self, key: str, kind: type, expected: str, default: T) -> T:
        """The value at ``key`` if it is a ``kind`` (``expected`` says so in the error); ``default``
        when absent or null."""
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, kind):
            raise self.bad(key, v, expected)
        return cast(T, v)

    def flag(self, key: str, default: bool) -> bool:
        """true or false (JSON booleans only: 1 and "yes" are not)."""
        return self._typed(key, bool, "true or false", default)

    def text(self, key: str, default: str = "") -> str:
        return self._typed(key, str, "a string", default)

    def layers(self, key: str, n: int) -> set[int] | None:
        """A list of layer indices in [0, n); None when absent."""
        v = self.cfg.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(not isinstance(i, bool) and isinstance(i, int) and 0 <= i < n for i in v):
            raise self.bad(key, v, f"a list of layer indices in [0, {n})")
        return set(v)

    def items(self, key: str, kinds: tuple[type, ...], n: int | None = None) -> list[Any] | None:
        """A list of values of ``kinds`` (of length ``n`` where given); None when absent."""
        v = self.cfg.get(key)
        if v is None:
            return None
        names = " or ".join(k.__name__ for k in kinds)

        def fits(i: Any) -> bool:  # JSON true is an int to Python: only where bool is asked for
            return bool in kinds if isinstance(i, bool) else isinstance(i, kinds)

        if not isinstance(v, list) or not all(fits(i) for i in v):
            raise self.bad(key, v, f"a list of {names}")
        if n is not None and len(v) != n:
            raise self.bad(key, v, f"a list of {n} entries (one per layer)")
        return v

    def section(self, key: str) -> Mapping[str, Any]:
        """A nested object (empty when absent)."""
        return self._typed(key, Mapping, "a JSON object", {})
