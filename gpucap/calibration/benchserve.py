"""Read the JSON results of vLLM's and SGLang's serving benchmarks, and vLLM's sweep summary.

* vLLM ``--save-result`` JSON from ``vllm bench serve`` (vllm/benchmarks/serve.py) and from the
  older ``benchmarks/benchmark_serving.py`` (whose goodput key is ``"request_goodput:"``, trailing
  colon included). ``--metadata k=v`` pairs sit at the top level. ``--append-result`` files hold
  one such object a line (JSON lines); a JSON list of them (``vllm bench sweep`` summary.json) too.
* ``vllm bench sweep`` ``summary.csv``: pandas ``to_csv`` of the run dicts, index column first.
* SGLang ``python -m sglang.bench_serving --output-file``: JSON lines, one object per run;
  ``request_rate`` inf is the non-standard literal ``Infinity``; ``max_concurrency`` is the cap
  (its ``concurrency`` key is the measured average and is not used). Dec-2024 files lack
  request_throughput, TPOT and the TTFT/ITL means.

A JSON file whose one object has ``benchmarks`` is GuideLLM's (``gpucap.calibration.guidellm``).
Means of input and output length are total tokens / completed requests.
"""

from __future__ import annotations

import io
import json
import math
import re
from typing import Any

import pandas as pd

from gpucap.calibration.guidellm import read_guidellm
from gpucap.calibration.resultfields import LATENCY, hardware_fields, new_row, number
from gpucap.units import MS


def bench_run(d: Any, where: str) -> dict[str, Any]:
    """One run of vLLM (serve.py, benchmark_serving.py, sweep) or SGLang bench_serving."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a JSON object with the result keys, got {type(d).__name__}")
    for key in ("completed", "duration"):
        if d.get(key) is None:
            raise ValueError(f"{where}: missing required key {key!r}")
    completed, duration = number(d, "completed", where), number(d, "duration", where)
    row = new_row(**hardware_fields(d, where), completed=completed, duration_s=duration, backend=d.get("backend"))
    row["model"] = row["model"] or d.get("model_id")
    row["num_prompts"] = number(d, "num_prompts", where)
    row["failed"] = number(d, "failed", where)
    row["request_rate"] = number(d, "request_rate", where)
    row["concurrency"] = number(d, "max_concurrency", where)
    row["request_throughput_per_s"] = number(d, "request_throughput", where)
    row["output_tokens_per_s"] = number(d, "output_throughput", where)
    row["total_tokens_per_s"] = number(d, "total_token_throughput", where)
    goodput = "request_goodput" if d.get("request_goodput") is not None else "request_goodput:"
    row["goodput_per_s"] = number(d, goodput, where)
    for col in LATENCY:  # SGLang writes e2e_latency where vLLM writes e2el
        metric, stat, _ = col.split("_")
        for key in [f"{stat}_{metric}_ms", f"{stat}_e2e_latency_ms"][: 1 + (metric == "e2el")]:
            row[col] = row[col] if d.get(key) is None else number(d, key, where, MS)
    tokens_in, tokens_out = number(d, "total_input_tokens", where), number(d, "total_output_tokens", where)
    if completed:
        row["input_len_mean"] = None if tokens_in is None else tokens_in / completed
        row["output_len_mean"] = None if tokens_out is None else tokens_out / completed
    if duration and row["total_tokens_per_s"] is None and tokens_in is not None and tokens_out is not None:
        row["total_tokens_per_s"] = (tokens_in + tokens_out) / duration
    return row


def json_values(text: str, where: str, broken: list[tuple[str, str]] | None = None) -> list[tuple[Any, int]]:
    """Every JSON value in ``text`` (one document, JSON lines, or concatenated), with its line;
    linear in the text's length (lines counted from the previous value on). A value that does not
    parse is an error naming its line; with ``broken``, it is listed there (name, reason) and
    reading goes on from the next line (the state an interrupted ``--append-result`` leaves: the
    complete lines keep their runs; reading resumes at the next line that begins with ``{``)."""
    decoder, i, line, counted = json.JSONDecoder(), 0, 1, 0
    space = re.compile(r"\s*")
    out: list[tuple[Any, int]] = []
    while True:
        i = space.match(text, i).end()  # type: ignore[union-attr]
        if i == len(text):
            return out
        line += text.count("\n", counted, i)
        counted = i
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            why = f"truncated or invalid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
            if broken is None:
                raise ValueError(f"{where}: {why}") from None
            broken.append((f"{where}, line {line}", why))
            nxt = text.find("\n{", i)  # the next line that opens a value (not a line inside this one)
            i = len(text) if nxt < 0 else nxt + 1
            continue
        except RecursionError:
            raise ValueError(f"{where}: JSON nested too deeply at line {line} (not a load-test result)") from None
        except ValueError as exc:  # e.g. an integer longer than Python reads
            raise ValueError(f"{where}: unreadable JSON value at line {line} ({str(exc)[:80]})") from None
        out.append((obj, line))


def read_bench_json(text: str, where: str, bad_runs: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """The runs of a JSON file; with ``bad_runs``, a run that does not read (a non-finite or
    absurd value, a missing key) is listed there and the file's other runs still load."""
    broken: list[tuple[str, str]] = []
    objs = json_values(text, where, None if bad_runs is None else broken)
    if not objs:  # nothing parsed: the file itself is broken, not one of its lines
        raise ValueError(f"{where}: {broken[0][1]}")
    if bad_runs is not None:
        bad_runs.extend(broken)
    if len(objs) == 1 and isinstance(objs[0][0], dict) and "benchmarks" in objs[0][0]:
        return read_guidellm(objs[0][0], where)
    if len(objs) == 1 and isinstance(objs[0][0], list):
        items = [(d, f"{where}, item {k}") for k, d in enumerate(objs[0][0])]
    elif len(objs) == 1:
        return [bench_run(objs[0][0], where)]
    else:
        items = [(d, f"{where}, line {line}") for d, line in objs]
    rows = []
    for d, name in items:
        try:
            rows.append(bench_run(d, name))
        except ValueError as exc:
            if bad_runs is None:
                raise
            bad_runs.append((name, str(exc)))
    return rows


def read_sweep_csv(text: str, where: str) -> list[dict[str, Any]]:
    """The runs of a ``vllm bench sweep`` summary.csv, one per row."""
    try:
        df = pd.read_csv(io.StringIO(text), index_col=0)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{where}: not a readable CSV ({exc})") from None
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        clean = {str(k): None if isinstance(v, float) and math.isnan(v) else v for k, v in rec.items()}
        rows.append(bench_run(clean, f"{where}, row {i + 2}"))
    return rows
