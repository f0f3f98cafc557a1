"""``gpucap simulate``: one load-test run of one replica, step by step, reported as
``vllm bench serve`` reports it (``gpucap.queueing.simulate.run_benchmark``)."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import Any

from gpucap.cli.common import add_coefficients, add_json
from gpucap.cli.fields import add_options, values
from gpucap.config import Deployment, EngineConfig, Workload
from gpucap.options import option
from gpucap.queueing.benchstats import METRIC_NAMES
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import LOAD_MODES, Load
from gpucap.queueing.simulate import run_benchmark
from gpucap.types import STATISTICS

LENGTH_KINDS = ("fixed", "range", "dataset")
DEPLOYMENT = ("model", "gpu", "tp", "pp", "ep", "weight_dtype", "kv_dtype", "gpu_file")
ENGINE = ("engine", "max_num_seqs", "max_num_batched_tokens", "overlap_host")


@dataclass(frozen=True)
class SimulateOptions:
    """``gpucap simulate``'s own options: the front end, how lengths vary, what is shown first,
    the random seed."""

    offline: bool = option(False, kind="switch", help="no HTTP server (trtllm-bench, vllm bench throughput)")
    lengths: str = option("fixed", help=f"{', '.join(LENGTH_KINDS)} (dataset: exponential)")
    range_ratio: float = option(0.0, kind="float", help="--random-range-ratio with --lengths range")
    stat: str = option("mean", help=f"statistic shown first: {', '.join(STATISTICS)}")
    seed: int = option(0, kind="int", help="the run's random seed (default 0)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("simulate", help="one load-test run step by step: TTFT/TPOT/ITL as vllm bench serve reports")
    add_options(p, Deployment, DEPLOYMENT)
    add_options(p, EngineConfig, ENGINE)
    add_options(p, SimulateOptions, ("offline",))
    add_options(p, Load)  # the load's mode and size, checked with their flags' names in _load
    add_options(
        p,
        Workload,
        ("input_len", "output_len"),
        helps={"input_len": "prompt tokens (mean)", "output_len": "output tokens (mean)"},
    )
    add_options(p, SimulateOptions, ("lengths", "range_ratio", "stat"))
    add_coefficients(p)
    add_options(p, SimulateOptions, ("seed",))
    add_json(p, "the run's statistics")


def _lengths(a: argparse.Namespace) -> tuple[Lengths, Lengths]:
    if a.lengths not in LENGTH_KINDS:
        raise ValueError(f"unknown --lengths {a.lengths!r}; use one of {', '.join(LENGTH_KINDS)}")
    if a.lengths == "range":
        return Lengths.range_ratio(a.input_len, a.range_ratio), Lengths.range_ratio(a.output_len, a.range_ratio)
    if a.range_ratio:
        raise ValueError("--range-ratio needs --lengths range")
    if a.lengths == "dataset":
        return Lengths.exponential(a.input_len), Lengths.exponential(a.output_len)
    return Lengths.fixed(a.input_len), Lengths.fixed(a.output_len)


def _load(a: argparse.Namespace) -> Load:
    if a.mode not in LOAD_MODES:
        raise ValueError(f"unknown --mode {a.mode!r}; use one of {', '.join(LOAD_MODES)}")
    if a.mode == "closed-loop":
        if a.concurrency is None:
            raise ValueError("--mode closed-loop needs --concurrency C")
        return Load("closed-loop", a.num_prompts, concurrency=a.concurrency)
    if a.mode == "open-loop":
        rate = a.request_rate
        if rate is None or not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"--mode open-loop needs a --request-rate above 0, got {rate!r}")
        return Load("open-loop", a.num_prompts, request_rate=rate, arrivals=a.arrivals, burstiness=a.burstiness)
    return Load("all-at-once", a.num_prompts)


def run(a: argparse.Namespace) -> int:
    from gpucap.physics.coefficients import Coefficients

    if a.stat not in STATISTICS:
        raise ValueError(f"unknown --stat {a.stat!r}; use one of {', '.join(STATISTICS)}")
    load = _load(a)
    inp, out = _lengths(a)
    engine = EngineConfig(**values(a, EngineConfig, ENGINE), front_end="offline" if a.offline else "http")
    hw = Deployment(**values(a, Deployment, DEPLOYMENT), engine=engine).resolve()
    coef = Coefficients.resolve(a.coefficients, a.engine)
    result = run_benchmark(hw, coef, load, input_len=inp, output_len=out, seed=a.seed)
    if a.json:
        print(
            json.dumps(
                {
                    "load": load.describe(),
                    "duration_s": result.duration_s,
                    "output_tokens_per_s": result.output_tokens_per_s,
                    "requests_per_s": result.requests_per_s,
                    "preemptions": result.preemptions,
                    **{f"{m}_ms": {s: v * 1e3 for s, v in result.stats[m].items()} for m in METRIC_NAMES},
                },
                indent=2,
            )
        )
        return 0
    order = [a.stat, *(s for s in STATISTICS if s != a.stat)]
    print(
        f"{hw.spec.name} on {hw.gpu.key} (tp={hw.layout.tp} pp={hw.layout.pp}), {hw.engine.engine}: {load.describe()}"
    )
    print(
        f"  lengths: {inp.label} in, {out.label} out; {result.steps:,} engine steps, {result.preemptions} preemptions"
    )
    print(f"  duration {result.duration_s:,.2f} s, output {result.output_tokens_per_s:,.1f} tok/s, "
          f"{result.requests_per_s:,.2f} requests/s")  # fmt: skip
    for m, label in zip(METRIC_NAMES, ("TTFT", "TPOT", "ITL", "E2E"), strict=True):
        print(f"  {label:<5}" + "  ".join(f"{s} {result.stats[m][s] * 1e3:,.1f} ms" for s in order))
    return 0
