"""Errors the physics raises with their numbers, so that the CLI and the pages can say them in
their own words: what does not fit, by how much, and which options would."""

from __future__ import annotations


class DoesNotFit(ValueError):
    """The model's weights and reservations leave no room for the KV cache (or for one request).

    ``short_bytes``: bytes per GPU missing (0 when the weights fit but one request's KV does
    not); ``options``: changes that would leave room, in plain words ("fp8 weights", "tp x pp = 4
    or more GPUs per replica"). ``str()`` is the whole sentence."""

    def __init__(self, message: str, *, short_bytes: float = 0.0, options: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.short_bytes = float(short_bytes)
        self.options = tuple(options)


class UnknownName(ValueError):
    """A GPU, model or other catalog entry that is not known: ``kind`` ("GPU", "model"), the
    ``name`` asked for and the ``close`` names the catalog holds."""

    def __init__(self, message: str, *, kind: str, name: str, close: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.close = tuple(close)
