"""Prometheus scrapes of an engine's ``/metrics`` read into one time series.

Inputs (``read_scrapes``):

- a folder of scrapes in the Prometheus text format, one file per scrape (``*.prom``, ``*.txt``,
  ``*.metrics``), as ``gpucap telemetry --scrape`` writes them (``gpucap.telemetry.scrape``) or any
  other scraper does. Each file's time is, in this order: its ``# scraped at ... (UNIX)`` comment
  line; a time in its name (``scrape-<unix milliseconds>``, ``<unix seconds>``, or
  ``YYYYmmddTHHMMSS`` / ``YYYY-mm-ddTHH:MM:SS`` in UTC); its modification time. The first that a
  file has wins, and the report says which each scrape used. Files are taken in the order of their
  times; where a file's time is only its modification time (which a copy resets), the files'
  names must sort in the same order as their times, else the reader refuses ("time goes
  backwards").
- a JSON export of Prometheus' ``/api/v1/query_range`` (``{"status": "success", "data":
  {"resultType": "matrix", "result": [{"metric": {"__name__": ..., labels}, "values": [[unix,
  "value"], ...]}]}}``): one scrape per timestamp.
- a single scrape file.

Every file is parsed with ``prometheus_client``'s parser. The samples gpucap reads are those of
``gpucap.telemetry.families``: per scrape, each family's value summed over the ``engine`` label
(vLLM's data-parallel ranks) for one ``model_name``; histograms keep their bucket counts with
whatever boundaries the server used. Beside them, the HTTP server's own request durations on the
generating handlers (``families.HTTP_DURATION``: ``values["http_sum"]``, ``values["http_count"]``). A counter that goes down, or a family whose ``_created``
time changes, marks a restart (``Series.segments``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gpucap.telemetry.families import CACHE_INFO, FAMILIES, GENERATE_HANDLERS, HTTP_DURATION, engine_of
from gpucap.textfiles import read_text_gz

MAX_SCRAPE_BYTES = 64 << 20
MAX_EXPORT_BYTES = 1 << 30
SCRAPE_SUFFIXES = (".prom", ".txt", ".metrics")  # and each of them gzipped (".prom.gz")
_HEADER = re.compile(r"^# scraped at [^(\n]*\((\d+(?:\.\d+)?)\)", re.MULTILINE)
_NAME_MS = re.compile(r"(?<!\d)(\d{13})(?!\d)")
_NAME_S = re.compile(r"(?<!\d)(\d{10}(?:\.\d+)?)(?![\d])")
MTIME = "file modification time"
_NAME_ISO = re.compile(r"(\d{4})-?(\d\d)-?(\d\d)[T_-]?(\d\d):?(\d\d):?(\d\d)")


@dataclass(frozen=True)
class Scrape:
    """One scrape: its time (unix seconds), where the time came from, the file, the engine, and
    per family of ``FAMILIES`` its value (``values["ttft_sum"]``, ``values["running"]``, ...),
    its buckets (``buckets["ttft"] = {upper bound: cumulative count}``) and its ``_created`` time;
    ``info``: the labels of the cache settings (``vllm:cache_config_info``); ``models``: the
    ``model_name`` labels seen."""

    time_s: float
    time_from: str
    path: str
    engine: str
    values: dict[str, float]
    buckets: dict[str, dict[float, float]]
    created: dict[str, float]
    info: dict[str, str]
    models: frozenset[str]


@dataclass
class Series:
    """Scrapes of one server in time order, with the restarts found between them: ``segments``
    holds, per scrape, the count of restarts before it; ``notes`` what the reader decided."""

    scrapes: list[Scrape]
    model_name: str | None
    segments: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def engine(self) -> str:
        return self.scrapes[0].engine


def _file_time(path: Path, text: str) -> tuple[float, str]:
    """(unix seconds, which rule gave it) for one scrape file (module docstring)."""
    if m := _HEADER.search(text[:4096]):
        return float(m.group(1)), "'# scraped at' line"
    name = _stem(path).stem
    if m := _NAME_MS.search(name):
        return int(m.group(1)) / 1e3, "file name (unix ms)"
    if m := _NAME_ISO.search(name):
        y, mo, d, h, mi, s = (int(g) for g in m.groups())
        try:
            return dt.datetime(y, mo, d, h, mi, s, tzinfo=dt.UTC).timestamp(), "file name (UTC time)"
        except ValueError:
            pass
    if m := _NAME_S.search(name):
        return float(m.group(1)), "file name (unix s)"
    return path.stat().st_mtime, MTIME


def _bad_line(text: str) -> int:
    """The first line the parser refuses (1-based), 0 if each line parses alone."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except Exception:  # the parser raises ValueError and others on what it cannot read
            return number
    return 0


def _samples(text: str, where: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of every sample in a text-format scrape."""
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ]
    except Exception as exc:
        line = _bad_line(text)
        at = f" line {line}" if line else ""
        raise ValueError(
            f"{where}{at}: not the Prometheus text format ({str(exc)[:80]}); give the text a /metrics endpoint serves"
        ) from None


def _lookup() -> dict[str, tuple[str, str, str, str]]:
    """Sample name -> (short name, part, engine, family name), part one of sum, count, bucket, total,
    created, value."""
    out: dict[str, tuple[str, str, str, str]] = {}
    for short, fam in FAMILIES.items():
        for engine, names in fam.names.items():
            for name in names:
                if fam.kind == "histogram":
                    for part in ("sum", "count", "bucket", "created"):
                        out[f"{name}_{part}"] = (short, part, engine, name)
                elif fam.kind == "counter":
                    out[f"{name}_total"] = (short, "total", engine, name)
                    out[f"{name}_created"] = (short, "created", engine, name)
                else:
                    out[name] = (short, "value", engine, name)
    return out


_LOOKUP = _lookup()


def _newest_names(samples: list[tuple[str, dict[str, str], float]]) -> dict[str, str]:
    """Per short name, the newest family name present (an old and a renamed family can coexist)."""
    present = {n for n, _, _ in samples}
    chosen: dict[str, str] = {}
    for short, fam in FAMILIES.items():
        for names in fam.names.values():
            for name in names:
                stems = (f"{name}_count", f"{name}_total", name)
                if any(s in present for s in stems):
                    chosen.setdefault(short, name)
                    break
    return chosen


def to_scrape(
    samples: list[tuple[str, dict[str, str], float]], time_s: float, time_from: str, where: str, model: str | None
) -> Scrape:
    """One scrape's samples as a ``Scrape`` for ``model`` (all models when None: the caller checks
    there is one)."""
    engine = engine_of({n for n, _, _ in samples})
    if engine is None and any(
        n == "http_requests_total" and lab.get("handler", "").startswith("/v1/") for n, lab, _ in samples
    ):
        raise ValueError(
            f"{where}: an OpenAI-compatible server's HTTP metrics and no engine metric: a vLLM server started with "
            "--disable-log-stats records nothing gpucap can read; start it without that flag"
        )
    if engine is None:
        raise ValueError(
            f"{where}: no vllm: or sglang: metric in it: not an engine gpucap reads (vLLM from 0.9, or SGLang started "
            "with --enable-metrics)"
        )
    chosen = _newest_names(samples)
    values: dict[str, float] = defaultdict(float)
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    created: dict[str, float] = {}
    info: dict[str, str] = {}
    models = set()
    for name, labels, value in samples:
        if name == CACHE_INFO.get(engine):
            info = {k: v for k, v in labels.items() if k not in ("engine", "model_name")}
            continue
        if name in (f"{HTTP_DURATION}_sum", f"{HTTP_DURATION}_count") and labels.get("handler") in GENERATE_HANDLERS:
            values[f"http_{name.rsplit('_', 1)[1]}"] += value
            continue
        hit = _LOOKUP.get(name)
        if hit is None or hit[2] != engine:
            continue
        short, part, _, family = hit
        if family != chosen.get(short):
            continue  # an older name of a family the scrape also has under its new name
        if "model_name" in labels:
            models.add(labels["model_name"])
            if model is not None and labels["model_name"] != model:
                continue
        if part == "created":
            created[short] = min(created.get(short, math.inf), value)
        elif part == "bucket":
            buckets[short][float(labels.get("le", "inf"))] += value
        elif part in ("sum", "count"):
            values[f"{short}_{part}"] += value
        else:
            values[short] += value
    return Scrape(
        time_s=time_s,
        time_from=time_from,
        path=where,
        engine=engine,
        values=dict(values),
        buckets={k: dict(sorted(v.items())) for k, v in buckets.items()},
        created=created,
        info=info,
        models=frozenset(models),
    )


def _scrape_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and _stem(p).suffix in SCRAPE_SUFFIXES)
    if not files:
        raise ValueError(f"{folder}: no scrape files ({', '.join('*' + s for s in SCRAPE_SUFFIXES)}, or .gz) in it")
    return files


def _stem(path: Path) -> Path:
    """The file name without a ``.gz``."""
    return path.with_suffix("") if path.suffix == ".gz" else path


def _natural(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _from_files(files: list[Path], model: str | None) -> list[Scrape]:
    out = []
    for path in sorted(files, key=lambda p: _natural(p.name)):
        text = read_text_gz(path, "scrape", MAX_SCRAPE_BYTES)
        t, rule = _file_time(path, text)
        out.append(to_scrape(_samples(text, str(path)), t, rule, str(path), model))
    by_mtime = any(s.time_from == MTIME for s in out)
    for a, b in zip(out, out[1:], strict=False):
        if b.time_s == a.time_s:
            raise ValueError(f"{a.path} and {b.path} have the same time ({a.time_from}); give each scrape its own")
        if b.time_s < a.time_s and by_mtime:
            raise ValueError(
                f"time goes backwards from {a.path} to {b.path} ({a.time_s:.3f} -> {b.time_s:.3f} s, "
                f"{b.time_from}): name the files in the order they were scraped or add '# scraped at' lines"
            )
    return sorted(out, key=lambda s: s.time_s)


def _from_query_range(path: Path, model: str | None) -> list[Scrape]:
    """One scrape per timestamp of a ``query_range`` export."""
    try:
        data = json.loads(read_text_gz(path, "Prometheus export", MAX_EXPORT_BYTES))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    result = data.get("data", {}).get("result") if isinstance(data, dict) else None
    if not (isinstance(data, dict) and data.get("status") == "success" and isinstance(result, list)):
        raise ValueError(f"{path}: not a Prometheus query_range export (status 'success', data.result[] expected)")
    if data["data"].get("resultType") != "matrix":
        raise ValueError(f"{path}: resultType is {data['data'].get('resultType')!r}; export a range query (matrix)")
    at: dict[float, list[tuple[str, dict[str, str], float]]] = defaultdict(list)
    for k, series in enumerate(result):
        labels = dict(series.get("metric") or {})
        name = labels.pop("__name__", None)
        if not name:
            raise ValueError(f"{path}: series {k} has no __name__; export the raw series, not an expression")
        for point in series.get("values") or []:
            try:
                t, v = float(point[0]), float(point[1])
            except (TypeError, ValueError, IndexError):
                raise ValueError(
                    f"{path}: series {k} ({name}) has a point that is not [time, value]: {point!r}"
                ) from None
            at[t].append((name, labels, v))
    if not at:
        raise ValueError(f"{path}: the export holds no points")
    return [to_scrape(at[t], t, "query_range timestamp", f"{path} @ {t:.3f}", model) for t in sorted(at)]


def _restarts(scrapes: list[Scrape]) -> list[int]:
    """Per scrape, the restarts before it: a counter or histogram count that went down, or a
    ``_created`` time that changed, since the previous scrape."""
    seg, out = 0, [0]
    for a, b in zip(scrapes, scrapes[1:], strict=False):
        went_down = any(
            b.values.get(k, math.inf) < v for k, v in a.values.items() if k.endswith("_count") or _is_counter(k)
        )
        new_created = any(abs(b.created.get(k, v) - v) > 1e-3 for k, v in a.created.items())
        seg += int(went_down or new_created)
        out.append(seg)
    return out


def _is_counter(key: str) -> bool:
    fam = FAMILIES.get(key)
    return fam is not None and fam.kind == "counter"


def read_scrapes(path: str | Path | Iterable[str | Path], model_name: str | None = None) -> Series:
    """The scrapes at ``path`` (module docstring) for one ``model_name`` (needed only when the
    series carries several)."""
    if isinstance(path, (str, Path)):
        p = Path(path)
        if not p.exists():
            raise ValueError(f"telemetry {p} does not exist")
        if p.is_dir():
            scrapes = _from_files(_scrape_files(p), model_name)
        elif _stem(p).suffix == ".json":
            scrapes = _from_query_range(p, model_name)
        else:
            scrapes = _from_files([p], model_name)
        where = str(p)
    else:
        files = [Path(f) for f in path]
        scrapes = _from_files(files, model_name)
        where = ", ".join(map(str, files[:3])) + (" ..." if len(files) > 3 else "")
    engines = {s.engine for s in scrapes}
    if len(engines) > 1:
        raise ValueError(f"{where}: scrapes of {' and '.join(sorted(engines))} mixed; give one server's scrapes")
    models = set().union(*(s.models for s in scrapes))
    if model_name is None and len(models) > 1:
        raise ValueError(
            f"{where}: {len(models)} model_name labels in one series ({', '.join(sorted(models))}); choose one with "
            "--model-name"
        )
    if model_name is not None and model_name not in models:
        raise ValueError(
            f"{where}: no series for model_name {model_name!r} (seen: {', '.join(sorted(models)) or 'none'})"
        )
    infos = {json.dumps(s.info, sort_keys=True) for s in scrapes if s.info}
    if len(infos) > 1:
        raise ValueError(
            f"{where}: scrapes from servers with different cache settings (vllm:cache_config_info differs, e.g. "
            f"num_gpu_blocks); give one server's scrapes"
        )
    if not any(k.endswith("_count") for s in scrapes for k in s.values):
        raise ValueError(
            f"{where}: no request histogram (TTFT, E2E, lengths) in any scrape: the server records nothing gpucap can "
            "read (vLLM started with --disable-log-stats?); start it without that flag"
        )
    rules = sorted({s.time_from for s in scrapes})
    notes = [f"{len(scrapes)} scrapes; time from {', '.join(rules)}"]
    return Series(scrapes, model_name or (next(iter(models)) if models else None), _restarts(scrapes), notes)
