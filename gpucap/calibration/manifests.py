"""Read manifests: the hardware, parallelism, engine and model of result files, by file-name glob.

JSON ``{"runs/*.json": {"gpu": "H100-SXM-80GB", "tp": 2, "engine": "vllm"}}``, or CSV with a
``pattern`` column and any of the columns gpu, num_gpus, tp, pp, ep, engine, model (empty cells
ignored). A glob matches the file's path relative to the manifest's folder (``*`` also crosses
folders) or its bare name; every matching entry applies, later ones overriding earlier ones; keys
starting with ``_`` are comments. A model given as a relative path to a ``config.json`` is read
relative to the manifest's folder.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpucap.calibration.resultfields import hardware_fields
from gpucap.textfiles import read_text

MANIFEST_NAMES = ("manifest.json", "manifest.csv")
Manifest = list[tuple[Path | None, str, dict[str, Any]]]  # (folder, glob, fields)


def read_manifest(source: str | Path | Mapping[str, Mapping[str, Any]]) -> Manifest:
    """A manifest file (JSON or CSV, see the module docstring) or a dict {glob: {field: value}}."""
    if isinstance(source, Mapping):
        folder, entries, where = None, dict(source), "manifest"
    else:
        path = Path(source)
        folder, where = path.parent, str(path)
        try:
            text = read_text(path, "manifest")
            if path.suffix.lower() == ".csv":
                entries = {r.pop("pattern", "") or "": r for r in csv.DictReader(io.StringIO(text))}
            else:
                entries = json.loads(text)
        except FileNotFoundError:
            raise ValueError(f"{where}: no such manifest file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error, RecursionError) as exc:
            raise ValueError(f"{where}: unreadable manifest ({exc})") from None
    if not isinstance(entries, dict):
        raise ValueError(f"{where}: a manifest maps file globs to {{gpu, num_gpus, tp, pp, ep, engine, model}}")
    out: Manifest = []
    for glob, fields in entries.items():
        if str(glob).startswith("_"):
            continue
        if not glob or not isinstance(fields, dict):
            raise ValueError(f"{where}: entry {glob!r} must be a glob mapping to a dict of fields")
        checked = hardware_fields(fields, f"{where}: {glob}", strict=True)
        if folder is not None and "model" in checked:
            checked["model"] = model_beside(checked["model"], folder)
        out.append((folder, str(glob), checked))
    return out


def model_beside(model: Any, folder: Path) -> Any:
    """``model`` with a relative ``.json`` path (a config.json) made absolute from ``folder``;
    names of catalog models and absolute paths as they are."""
    if isinstance(model, str) and model.lower().endswith(".json") and not Path(model).is_absolute():
        return str((folder / model).resolve())
    return model


def manifest_fields(manifest: Manifest, file: Path) -> dict[str, Any]:
    """The fields every entry of ``manifest`` matching ``file`` gives, later entries winning."""
    merged: dict[str, Any] = {}
    for folder, glob, fields in manifest:
        names = [file.name, "/" + file.as_posix()]
        if folder is not None and file.resolve().is_relative_to(folder.resolve()):
            names.append(file.resolve().relative_to(folder.resolve()).as_posix())
        if any(fnmatch.fnmatch(n, glob) or fnmatch.fnmatch(n, "*/" + glob) for n in names):
            merged.update(fields)
    return merged
