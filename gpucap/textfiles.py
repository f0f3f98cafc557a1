"""Reading a file a user names (a GPU list, prices, coefficients, a config.json): a regular file
of bounded size, UTF-8 text (a byte-order mark is dropped); anything else is one line naming the
file and the problem. A missing file is a ``MissingFileError``, a ValueError that names the file,
and a FileNotFoundError for a caller that says what to give instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_BYTES = 16 << 20  # no GPU list, price list, coefficients or config.json is this large


class MissingFileError(FileNotFoundError, ValueError):
    """``{what} {path} does not exist``."""


def _checked(path: Path, what: str, max_bytes: int) -> None:
    """A regular file of at most ``max_bytes``, or the error naming it."""
    if not path.exists():
        raise MissingFileError(f"{what} {path} does not exist")
    if not path.is_file():
        raise ValueError(f"{what} {path} is {'a folder' if path.is_dir() else 'not a regular file'}")
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(f"{what} {path} is {size:,} bytes, more than such a file holds ({max_bytes:,} at most)")


def read_text(path: str | Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The text of ``path``; ``what`` names the file in errors ("GPU file", "price file")."""
    path = Path(path)
    _checked(path, what, max_bytes)
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path} is not UTF-8 text (a binary file?)") from None
    except OSError as exc:
        raise ValueError(f"{what} {path} cannot be read ({exc.strerror or exc})") from None


def read_json(path: str | Path, what: str, max_bytes: int = MAX_BYTES, **loads: Any) -> Any:
    """The JSON value in ``path`` (``json.loads(text, **loads)``); text that is not JSON, is nested
    too deeply, or holds a value Python does not read (an integer of thousands of digits) is an
    error naming the file. An error a ``loads`` hook raises that names the file passes as it is."""
    path = Path(path)
    text = read_text(path, what, max_bytes)
    try:
        return json.loads(text, **loads)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} {path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{what} {path} is JSON nested too deeply to be a {what}") from None
    except ValueError as exc:
        if str(path) in str(exc):
            raise
        raise ValueError(f"{what} {path} holds an unreadable JSON value ({str(exc)[:80]})") from None


def peek_text(path: str | Path, what: str, max_bytes: int = MAX_BYTES, head_bytes: int = 1 << 16) -> str:
    """The first ``head_bytes`` of ``path`` as text (a character cut at the end is dropped), with
    ``read_text``'s checks of the whole file: to tell a format before reading a large file."""
    path = Path(path)
    _checked(path, what, max_bytes)
    try:
        with path.open("rb") as f:
            return f.read(head_bytes).decode("utf-8-sig", errors="ignore")
    except OSError as exc:
        raise ValueError(f"{what} {path} cannot be read ({exc.strerror or exc})") from None


def read_text_gz(path: str | Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """``read_text``, or for a ``.gz`` file its decompressed text, also at most ``max_bytes`` (a
    small file that inflates past it is refused, not read into memory)."""
    import gzip

    path = Path(path)
    if path.suffix != ".gz" or not path.is_file():
        return read_text(path, what, max_bytes)  # a missing or irregular file: read_text says so
    try:
        with gzip.open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except (OSError, EOFError) as exc:
        raise ValueError(f"{what} {path} is not a readable gzip file ({exc})") from None
    return bounded_text(data, max_bytes, f"{what} {path} once decompressed")


def bounded_text(data: bytes, max_bytes: int, where: str) -> str:
    """``data``, read as at most ``max_bytes + 1`` bytes, as UTF-8 text (a byte-order mark is
    dropped); more than ``max_bytes``, or bytes that are not UTF-8, is an error naming ``where``."""
    if len(data) > max_bytes:
        raise ValueError(f"{where} is more than {max_bytes:,} bytes, more than such a file holds")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text") from None
