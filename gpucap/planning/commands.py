"""The commands that check a plan on real GPUs: plan -> load test -> recalibrate, as one loop.

A row of ``Plan.plans`` is a prediction: one replica of this split, in these formats, with the
engine's knobs at the values the planner assumed, carries ``capacity_requests_per_s`` (or
``capacity_concurrency``) within the SLOs. ``verify_commands`` prints what tests that claim:

1. ``serve``: the server command line of one replica (vLLM ``vllm serve``, SGLang
   ``python -m sglang.launch_server`` or TensorRT-LLM ``trtllm-serve``), with the knobs of the
   ``Hardware`` the planner built (``_Question.hardware`` in ``gpucap.planning.search``) pinned:
   running requests, batched tokens, the memory fraction, a block size that differs from the
   engine's own, the KV format, and a context of the longest input + longest output.
2. ``bench``: ``vllm bench serve`` against that server (any OpenAI-compatible one), one run per
   load level: ``LOAD_FRACTIONS`` of the replica's planned capacity, and the load one replica
   takes at target with the spares out, ``target / (replicas - spare_replicas)`` (output-token
   targets: ``/ mean output length``). Concurrency targets sweep ``--max-concurrency`` instead.
   Each run saves its JSON with ``--metadata`` naming GPU, split, formats and knobs under the keys
   gpucap's result reader takes (``gpucap.calibration.resultfields.META_KEYS``), so step 3 needs
   no manifest. Up to 100% of capacity the SLOs should hold and at 120% they should not: a miss
   below or a pass above is what the recalibration corrects.
3. ``calibrate``: ``gpucap calibrate <result dir> --out <coefficients>`` fits the coefficients to
   those runs; ``replan``: ``gpucap plan ... --coefficients <coefficients>`` asks the same
   question again with them, on the GPU and formats the load test measured.

Where each flag name was confirmed (each engine's own CLI definition, then its documentation):

* ``vllm serve``: ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``: --tensor-parallel-size,
  --pipeline-parallel-size, --enable-expert-parallel, --max-num-seqs, --max-num-batched-tokens,
  --gpu-memory-utilization, --block-size, --kv-cache-dtype, --quantization, --max-model-len);
  https://docs.vllm.ai/en/v0.8.4/serving/engine_args.html (the flags, --kv-cache-dtype
  {auto,fp8,fp8_e5m2,fp8_e4m3}); https://docs.vllm.ai/en/v0.10.2/api/vllm/config/cache.html (``CacheDType``).
* ``vllm bench serve``: ``vllm/benchmarks/serve.py`` (``add_cli_args``: --backend {vllm, openai, ...},
  --endpoint, --host, --port, --request-rate, --burstiness, --max-concurrency, --ignore-eos,
  --percentile-metrics, --metric-percentiles, --save-result, --result-dir, --result-filename,
  --metadata KEY=VALUE merged at the top level of the result JSON as strings) and
  ``vllm/benchmarks/datasets`` (--dataset-name random, --random-input-len, --random-output-len,
  --random-range-ratio, --num-prompts, --seed); https://docs.vllm.ai/en/latest/cli/bench/serve/.
* SGLang: ``python/sglang/srt/server_args.py`` (``ServerArgs``: --model-path, --tp-size, --pp-size,
  --ep-size, --max-running-requests, --chunked-prefill-size, --mem-fraction-static, --page-size,
  --context-length, --kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3,...}, --quantization fp8);
  https://docs.sglang.io/docs/advanced_features/server_arguments.
* TensorRT-LLM: ``tensorrt_llm/commands/serve.py`` (click options: --backend pytorch, --tp_size,
  --pp_size, --ep_size, --max_batch_size, --max_num_tokens, --max_seq_len,
  --kv_cache_free_gpu_memory_fraction, --extra_llm_api_options) and ``tensorrt_llm/llmapi/llm_args.py``
  (``KvCacheConfig.dtype``, ``tokens_per_block`` default 32);
  https://nvidia.github.io/TensorRT-LLM/1.0.0rc6/commands/trtllm-serve/trtllm-serve.html.
"""

from __future__ import annotations

import math
import numbers
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import pandas as pd

from gpucap.config import SLO, EngineConfig, Hardware, hardware
from gpucap.planning.result import Plan, Target, describe_split
from gpucap.planning.servers import ENGINE_NAMES, SERVER_PORT, SERVERS, nondefault_block_size
from gpucap.queueing.lengths import Lengths, as_lengths
from gpucap.types import ENGINES

# The load levels of the sweep, as shares of the replica's planned capacity: two below it, at it,
# one above it (the SLOs should fail there). The load at target is added as its own level.
LOAD_FRACTIONS = (0.5, 0.8, 1.0, 1.2)
BENCH_DURATION_S = 300.0  # seconds of arrivals per request-rate level: the steady state dominates
MIN_PROMPTS = 500  # at least this many requests per level: a p99 with 5 requests above it
PROMPTS_PER_SLOT = 10  # concurrency levels: every request slot refilled this many times
MAX_RANGE_RATIO = 0.9  # vllm bench serve takes --random-range-ratio in [0, 1)
METRIC_PERCENTILES = "90,99"  # the percentiles gpucap's reader keeps (ttft_p90_s, ttft_p99_s, ...)
# The columns of a plan row the commands read; the capacity column depends on the target.
ROW_FIELDS = ("gpu", "gpus_per_replica", "tp", "pp", "ep", "weight_dtype", "kv_dtype", "replicas", "spare_replicas")


@dataclass(frozen=True)
class LoadLevel:
    """One run of the sweep: a per-replica request rate (open loop, Poisson or gamma arrivals) or
    concurrency (closed loop), the prompts it sends and its seed (each level its own prompts, so a
    server with prefix caching does not answer a level from the one before)."""

    label: str
    request_rate: float | None
    concurrency: int | None
    num_prompts: int
    seed: int

    @property
    def file_name(self) -> str:
        """Result file name, zero-padded so that a folder listing is in load order (as
        ``benchmarks/loadtest.py`` names its levels)."""
        if self.concurrency is not None:
            return f"concurrency-{self.concurrency:04d}.json"
        return f"rate-{self.request_rate:09.3f}".replace(".", "p") + ".json"

    def describe(self) -> str:
        load = f"{self.request_rate:g} requests/s" if self.concurrency is None else f"{self.concurrency} in flight"
        return f"{self.label}: {load}, {self.num_prompts} prompts"


@dataclass(frozen=True)
class VerifyCommands:
    """The commands that check one plan (module docstring): ``bench[k]`` runs ``levels[k]``."""

    title: str
    serve: str
    bench: list[str]
    levels: list[LoadLevel]
    calibrate: str
    replan: str
    notes: list[str]

    def text(self) -> str:
        """All of it as one shell-ready block, each step under a ``#`` comment."""
        lines = [f"# Verify {self.title}", *(f"# note: {n}" for n in self.notes), "", "# 1. serve one replica"]
        lines += [self.serve, "", "# 2. load-test it (once the server answers), one run per level"]
        for level, cmd in zip(self.levels, self.bench, strict=True):
            lines += [f"# {level.describe()}", cmd]
        lines += ["", "# 3. fit the coefficients to the results", self.calibrate]
        lines += ["", "# 4. plan again with the fitted coefficients", self.replan]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.text()


def verify_commands(
    model_id: str,
    row: pd.Series | Mapping[str, Any],
    *,
    target: Target,
    input_len: float | Lengths,
    output_len: float | Lengths,
    engine: str = "vllm",
    hw: Hardware | None = None,
    slo: SLO | None = None,
    burstiness: float = 1.0,
    result_dir: str = "results",
    fractions: Sequence[float] = LOAD_FRACTIONS,
) -> VerifyCommands:
    """The serve, load-test, calibrate and re-plan commands of plan ``row`` (a row of
    ``Plan.plans``) for ``model_id`` (the checkpoint served, a Hugging Face id or a path), at the
    ``target`` and lengths the plan was made for.

    ``hw``: the ``Hardware`` the planner used; None builds it as the planner does (``hardware``
    with ``EngineConfig(engine=engine)``), from ``model_id``, which must then name a catalog model.
    ``slo`` and ``burstiness``: the plan's, for the re-plan (and the load test's arrivals).
    ``fractions``: the load levels as shares of the planned per-replica capacity. Flag names and
    where each was confirmed: module docstring. Bad input raises ValueError naming the field."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if not fractions or any(not (math.isfinite(f) and f > 0) for f in fractions):
        raise ValueError(f"fractions must be positive shares of the capacity, e.g. {LOAD_FRACTIONS}; got {fractions!r}")
    inp, out = as_lengths(input_len, "input_len"), as_lengths(output_len, "output_len")
    fields = _row_fields(row, target)
    hw = _checked_hardware(model_id, fields, engine, hw)
    in_len, out_len, ratio, context, length_notes = bench_lengths(inp, out)
    serve, serve_notes = SERVERS[engine](model_id, hw, context)
    levels, load_note = load_levels(fields, target, out, fractions)
    meta = metadata(hw, fields, ratio)
    bench = [_bench(model_id, level, (in_len, out_len, ratio), burstiness, result_dir, meta) for level in levels]
    coefficients = coefficients_path(result_dir)
    replan = _replan(hw, fields, target, inp, out, slo, burstiness, coefficients, length_notes)
    return VerifyCommands(
        title=f"{fields['replicas']} replica(s) of {describe_split(fields)} on {ENGINE_NAMES[engine]}",
        serve=serve,
        bench=bench,
        levels=levels,
        calibrate=shlex.join(["gpucap", "calibrate", result_dir, "--out", coefficients]),
        replan=replan,
        notes=[load_note, *serve_notes, *length_notes],
    )


def plan_commands(
    result: Plan,
    *,
    input_len: float | Lengths | None = None,
    output_len: float | Lengths | None = None,
    row: int | None = None,
    model_id: str | None = None,
    engine: str | None = None,
    hw: Hardware | None = None,
    result_dir: str = "results",
) -> VerifyCommands:
    """``verify_commands`` for plan ``row`` of ``result`` (an index into ``result.plans``; None:
    the recommended plan, or the cheapest where nothing is recommended), with the plan's own
    target, SLOs, burstiness, lengths, engine and ``Hardware`` (``Plan.row_hardware``); each can
    be given instead. ``model_id`` None serves the planned model by its catalog id."""
    if result.plans.empty:
        raise ValueError("the plan has no option to verify (result.plans is empty; see result.rejected)")
    if row is None:
        chosen = result.plans.index[result.plans["recommended"].astype(bool)] if "recommended" in result.plans else []
        row = int(result.plans.index.get_loc(chosen[0])) if len(chosen) else 0
    if not 0 <= row < len(result.plans):
        raise ValueError(f"row {row} is not a plan; give 0 to {len(result.plans) - 1}")
    inp = input_len if input_len is not None else result.input_len
    out = output_len if output_len is not None else result.output_len
    if inp is None or out is None:
        raise ValueError("give input_len and output_len: the plan does not record the lengths it was made for")
    engine = engine or result.engine
    chosen_row = result.plans.iloc[row]
    if hw is None and result.row_hardware is not None and engine == result.engine:
        hw = result.row_hardware(chosen_row)
    return verify_commands(
        model_id or result.model, chosen_row, target=result.target, input_len=inp, output_len=out, engine=engine,
        hw=hw, slo=result.slo, burstiness=result.burstiness, result_dir=result_dir,
    )  # fmt: skip


def _row_fields(row: pd.Series | Mapping[str, Any], target: Target) -> dict[str, Any]:
    """The columns the commands read, checked: each present and a number where one is needed."""
    capacity = "capacity_concurrency" if target.kind == "concurrency" else "capacity_requests_per_s"
    fix = "pass a row of Plan.plans (gpucap.planning.search.plan), which has every column"
    out: dict[str, Any] = {}
    for name in (*ROW_FIELDS, capacity):
        if name not in row:
            raise ValueError(f"row has no column {name!r}; {fix}")
        out[name] = row[name]
    for name in ("gpus_per_replica", "tp", "pp", "ep", "replicas", "spare_replicas"):
        value = _real(out[name])
        if value is None or value != int(value) or value < 0:
            raise ValueError(f"row column {name!r} = {out[name]!r} is not a whole number; {fix}")
        out[name] = int(value)
    cap = _real(out[capacity])
    if cap is None or not (math.isfinite(cap) and cap > 0):
        raise ValueError(
            f"row column {capacity!r} = {out[capacity]!r} is not a positive capacity: a {target.kind} target needs "
            "the row of a plan made for that kind of target"
        )
    if out["replicas"] - out["spare_replicas"] < 1:
        raise ValueError(f"row has {out['replicas']} replicas and {out['spare_replicas']} spares: no replica serves")
    for name in ("gpu", "weight_dtype", "kv_dtype"):
        out[name] = str(out[name])
    return out


def _real(value: Any) -> float | None:
    """``value`` as a float when it is a number (numpy's too), not a bool; else None."""
    return None if isinstance(value, bool) or not isinstance(value, numbers.Real) else float(value)


def _checked_hardware(model_id: str, fields: dict[str, Any], engine: str, hw: Hardware | None) -> Hardware:
    """``hw``, checked against the row and the engine; or the planner's Hardware for the row."""
    if hw is None:
        try:
            return hardware(
                model_id, fields["gpu"], tp=fields["tp"], pp=fields["pp"], ep=fields["ep"],
                weight_dtype=fields["weight_dtype"], kv_dtype=fields["kv_dtype"], engine=EngineConfig(engine=engine),
            )  # fmt: skip
        except ValueError as err:
            raise ValueError(f"{err} (pass hw=, the Hardware the plan was made with)") from None
    if hw.engine.engine != engine:
        raise ValueError(f"hw is for engine {hw.engine.engine!r} but engine={engine!r}; give the same engine")
    given = {
        "gpu": hw.gpu.key, "gpus_per_replica": hw.layout.gpus_per_replica, "tp": hw.layout.tp, "pp": hw.layout.pp,
        "ep": hw.layout.ep, "weight_dtype": hw.weight_dtype, "kv_dtype": hw.kv_dtype,
    }  # fmt: skip
    for name, value in given.items():
        if value != fields[name]:
            raise ValueError(f"hw has {name} {value!r} but the row {fields[name]!r}: pass the Hardware of this row")
    return hw


def bench_lengths(inp: Lengths, out: Lengths) -> tuple[int, int, float, int, list[str]]:
    """``(input, output, r, context, notes)`` for ``vllm bench serve``'s random dataset: lengths
    uniform on ``[L (1 - r), L (1 + r)]`` (``Lengths.range_ratio``) with ``L`` the mean, so the means
    match the plan's; one ``r`` spreads input and output alike (the dataset has one), the one that
    reaches the longer tail, ``r = max(longest / mean - 1)``, at most ``MAX_RANGE_RATIO``; fixed
    lengths: r = 0. ``context``: the longest input + the longest output, of the plan or the test."""
    in_len, out_len = max(round(inp.mean), 1), max(round(out.mean), 1)
    spread = [lens.longest / lens.mean - 1 for lens in (inp, out) if not lens.is_fixed]
    ratio = round(min(max(spread, default=0.0), MAX_RANGE_RATIO), 3)
    context = sum(
        max(math.ceil(lens.longest), math.ceil(Lengths.range_ratio(n, ratio).longest))
        for lens, n in ((inp, in_len), (out, out_len))
    )
    notes = []
    if spread:
        capped = (
            f", and not its longest requests (r capped at {MAX_RANGE_RATIO:g})" if max(spread) > MAX_RANGE_RATIO else ""
        )
        notes.append(
            f"the load test draws lengths uniform within +/- {ratio:g} of the means ({in_len} in, {out_len} out; "
            f"--random-range-ratio): the plan's means, not its distribution{capped}"
        )
    return in_len, out_len, ratio, context, notes


def load_levels(
    fields: dict[str, Any], target: Target, out: Lengths, fractions: Sequence[float]
) -> tuple[list[LoadLevel], str]:
    """The sweep: ``fractions`` of the replica's planned capacity and the load at target, one
    replica's share with the spares out: ``target / (replicas - spare_replicas)`` (output-token
    targets over the mean output length, as the planner converts them); rates to 4 significant
    digits, concurrencies to whole requests (at least 1). Prompts: ``max(MIN_PROMPTS,
    rate x BENCH_DURATION_S)`` or ``max(MIN_PROMPTS, PROMPTS_PER_SLOT x concurrency)``."""
    serving = fields["replicas"] - fields["spare_replicas"]
    closed = target.kind == "concurrency"
    capacity = float(fields["capacity_concurrency" if closed else "capacity_requests_per_s"])
    fleet = target.value / out.mean if target.kind == "output_tps" else target.value
    at_target = fleet / serving
    wanted = [(f"{f:.0%} of the planned capacity", f * capacity) for f in fractions]
    wanted.append(("the load at target, spares out", at_target))
    levels: list[LoadLevel] = []
    seen: set[float] = set()
    for label, load in sorted(wanted, key=lambda w: w[1]):
        value = float(max(round(load), 1)) if closed else float(f"{load:.4g}")
        if value in seen:
            continue
        seen.add(value)
        seed = len(levels)
        if closed:
            prompts = max(MIN_PROMPTS, PROMPTS_PER_SLOT * int(value))
            levels.append(LoadLevel(label, None, int(value), prompts, seed))
        else:
            levels.append(LoadLevel(label, value, None, max(MIN_PROMPTS, math.ceil(value * BENCH_DURATION_S)), seed))
    unit = "requests in flight" if closed else "requests/s"
    note = (
        f"per replica: {capacity:.4g} {unit} within the SLOs (the plan's capacity), {at_target:.4g} {unit} at target "
        f"({fleet:.4g} over {serving} serving replicas); the SLOs should hold up to 100% of capacity and fail at "
        "120%: the recalibration corrects a miss below or a pass above"
    )
    return levels, note


def metadata(hw: Hardware, fields: dict[str, Any], ratio: float) -> dict[str, str]:
    """``--metadata`` pairs under the keys gpucap's result reader takes (``META_KEYS`` of
    ``gpucap.calibration.resultfields``): GPU, GPUs, split, engine, the model by its catalog name,
    formats, the engine knobs the plan assumed, and the range ratio when lengths vary."""
    eng = hw.engine
    pairs: dict[str, Any] = {
        "gpu": fields["gpu"], "num_gpus": fields["gpus_per_replica"], "tp": fields["tp"], "pp": fields["pp"],
        "ep": fields["ep"], "engine": eng.engine, "model": hw.spec.name, "weight_dtype": fields["weight_dtype"],
        "kv_cache_dtype": fields["kv_dtype"], "max_num_seqs": eng.max_num_seqs,
        "max_num_batched_tokens": eng.max_num_batched_tokens, "gpu_memory_utilization": f"{eng.gpu_memory_utilization:g}",
        "block_size": nondefault_block_size(hw), "range_ratio": f"{ratio:g}" if ratio else None,
    }  # fmt: skip
    return {k: str(v) for k, v in pairs.items() if v is not None}


def _bench(
    model_id: str, level: LoadLevel, sizes: tuple[int, int, float], burstiness: float, folder: str, meta: dict[str, str]
) -> str:
    """One ``vllm bench serve`` run against the OpenAI-compatible completions endpoint (every
    engine serves one; completions send the random prompt as it is, no chat template added)."""
    cmd = ["vllm", "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions"]
    cmd += ["--host", "127.0.0.1", "--port", str(SERVER_PORT), "--model", model_id]
    in_len, out_len, ratio = sizes
    cmd += ["--dataset-name", "random", "--random-input-len", str(in_len), "--random-output-len", str(out_len)]
    cmd += ["--random-range-ratio", f"{ratio:g}"] if ratio else []
    cmd += ["--ignore-eos", "--num-prompts", str(level.num_prompts), "--seed", str(level.seed)]
    if level.concurrency is not None:
        cmd += ["--max-concurrency", str(level.concurrency), "--request-rate", "inf"]
    else:
        cmd += ["--request-rate", f"{level.request_rate:g}"]
        cmd += ["--burstiness", f"{burstiness:g}"] if burstiness != 1.0 else []
    cmd += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", METRIC_PERCENTILES]
    cmd += ["--save-result", "--result-dir", folder, "--result-filename", level.file_name]
    return shlex.join([*cmd, "--metadata", *(f"{k}={v}" for k, v in meta.items())])


def coefficients_path(result_dir: str) -> str:
    """Where the fit goes: beside the results folder, not in it (a JSON file there would be read
    back as a result by the next ``gpucap calibrate``)."""
    folder = PurePath(result_dir)
    return str(folder.with_name(f"{folder.name or 'results'}-coefficients.json"))


def lengths_arg(lens: Lengths) -> tuple[str, bool]:
    """``lens`` as ``gpucap plan`` reads it (``Lengths.parse``): a token count, the percentiles it
    was given, or else its p1/p50/p90/p99 (True: an approximation of the distribution)."""
    if lens.is_fixed:
        return f"{lens.values[0]:g}", False
    points = lens.points or tuple((q, lens.quantile(q)) for q in (0.01, 0.5, 0.9, 0.99))
    return ",".join(f"p{q * 100:g}={x:g}" for q, x in points), not lens.points


def _replan(
    hw: Hardware,
    fields: dict[str, Any],
    target: Target,
    inp: Lengths,
    out: Lengths,
    slo: SLO | None,
    burstiness: float,
    coefficients: str,
    notes: list[str],
) -> str:
    """``gpucap plan`` for the same target, lengths and spares on the GPU and formats measured,
    with the fitted coefficients (``notes`` gets a line when a length distribution is approximated)."""
    flag = {"request_rate": "--target-rps", "concurrency": "--target-concurrency", "output_tps": "--target-output-tps"}
    cmd = ["gpucap", "plan", "--model", hw.spec.name, flag[target.kind], f"{target.value:g}"]
    for option, lens in (("--input-len", inp), ("--output-len", out)):
        text, approximate = lengths_arg(lens)
        cmd += [option, text]
        if approximate:
            notes.append(f"the re-plan gives {option} as percentiles ({text}), an approximation of the distribution")
    cmd += ["--gpus", fields["gpu"], "--engine", hw.engine.engine]
    cmd += ["--weight-dtypes", fields["weight_dtype"], "--kv-dtypes", fields["kv_dtype"]]
    cmd += ["--failure-spares", str(fields["spare_replicas"]), "--upgrade-spares", "0"]
    if slo is not None:
        cmd += ["--ttft-slo", f"{slo.ttft_s:g}", "--tpot-slo", f"{slo.tpot_s:g}", "--stat", slo.statistic]
    cmd += ["--burstiness", f"{burstiness:g}"] if burstiness != 1.0 else []
    return shlex.join([*cmd, "--coefficients", coefficients])
