"""``gpucap estimate``: memory, the concurrency each resource allows, the recommendation and the
speed of one deployment (``gpucap.estimate.estimate_for``). The options build the config
objects (``Deployment``, ``Workload``, ``SLO``, ``OperatingPoint``) the estimator takes."""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from gpucap.calibration.startuplog import StartupMemory, compare_text, read_startup_log
from gpucap.cli.common import KvBudget, add_coefficients, add_json
from gpucap.cli.fields import add_options, values
from gpucap.config import SLO, Deployment, EngineConfig, OperatingPoint, Speculative, Workload
from gpucap.estimate import estimate_for
from gpucap.options import option, options_of
from gpucap.physics.speculative import acceptance_length
from gpucap.report.text import estimate_to_dict, format_estimate
from gpucap.units import GiB


def _speculative(a: argparse.Namespace) -> Speculative | None:
    """The speculative-decoding options as one ``Speculative``, or None when not asked for."""
    given = a.acceptance_length is not None or a.speculative_acceptance_rate is not None
    if a.draft_tokens is None:
        if given or a.draft_model:
            raise ValueError("--speculative-draft-tokens K is needed with the other --speculative options")
        return None
    k = a.draft_tokens
    if a.speculative_acceptance_rate is not None:
        tau = acceptance_length(acceptance_rate=a.speculative_acceptance_rate, draft_tokens=k)
    elif a.acceptance_length is not None:
        tau = a.acceptance_length
    else:
        raise ValueError("give --speculative-acceptance-length TAU or --speculative-acceptance-rate ALPHA")
    return Speculative(
        draft_tokens=k,
        acceptance_length=tau,
        **values(a, Speculative, SPECULATIVE[1:]),
    )


# given, or read from a start-up log (``deployment``)
FROM_LOG = ("sampler", "moe_backend")
# the drafter's options (the acceptance length sits in a group with the acceptance rate)
SPECULATIVE = ("draft_tokens", "draft_layers", "draft_vocab_size", "draft_model")
ENGINE = tuple(name for name in options_of(EngineConfig) if name not in FROM_LOG)


@dataclass(frozen=True)
class EstimateOptions:
    """``gpucap estimate``'s own options: the load it answers for, a start-up log whose KV budget
    it takes, and speculative decoding's acceptance given as a rate per drafted token."""

    concurrency: float | None = option(None, kind="positive_float", help="requests in flight, all replicas")
    request_rate: float | None = option(
        None, kind="positive_float", help="arrivals per second, all replicas (open loop)"
    )
    startup_log: str | None = option(None, help="a vLLM start-up log: its KV budget is used, each term compared")
    speculative_acceptance_rate: float | None = option(None, kind="float", help="alpha per drafted token (i.i.d.)")


def add_parser(sub: Any) -> None:
    e = sub.add_parser("estimate", help="memory, per-resource concurrency, recommendation, speed")
    add_options(e, Deployment)
    add_options(e, Workload)
    add_options(e.add_mutually_exclusive_group(), EstimateOptions, ("concurrency", "request_rate"))
    add_options(e, SLO, ("ttft_s", "tpot_s"))  # the closed loop predicts means: no --stat
    add_options(e, EngineConfig, ENGINE)
    add_options(e, EngineConfig, FROM_LOG, defaults=dict.fromkeys(FROM_LOG))  # default: the log's, else the field's
    kv = e.add_mutually_exclusive_group()
    add_options(kv, KvBudget, helps={"kv_cache_memory": "KV budget per GPU, GiB (as vLLM's option)"})
    add_options(kv, EstimateOptions, ("startup_log",))
    add_coefficients(e)
    add_options(e, Speculative, SPECULATIVE, defaults={"draft_tokens": None})  # none: no speculative decoding
    tau = e.add_mutually_exclusive_group()
    add_options(tau, Speculative, ("acceptance_length",), defaults={"acceptance_length": None})
    add_options(tau, EstimateOptions, ("speculative_acceptance_rate",))
    add_json(e, "the estimate")


def _kv_cache_memory_bytes(a: argparse.Namespace, logged: StartupMemory | None) -> float | None:
    """The KV budget per GPU the options fix: ``--kv-cache-memory`` GiB, or the start-up log's."""
    if a.kv_cache_memory is not None:
        return float(a.kv_cache_memory) * GiB
    if logged is None:
        return None
    if logged.kv_gib is None:
        raise ValueError(f"{logged.source}: no 'Available KV cache memory' line, so no KV budget to use")
    if logged.kv_gib <= 0:
        raise ValueError(
            f"{logged.source}: the logged KV budget is {logged.kv_gib:g} GiB, so that start-up did not fit; "
            "raise --gpu-memory-utilization or use more GPUs per replica"
        )
    return logged.kv_gib * GiB


def deployment(a: argparse.Namespace, logged: StartupMemory | None = None) -> Deployment:
    """The deployment the options describe: model, GPUs, split, formats and engine knobs; the
    sampler and MoE backend, when not given, as the start-up log shows them."""
    engine = EngineConfig(
        kv_cache_memory_bytes=_kv_cache_memory_bytes(a, logged),
        **values(a, EngineConfig, ENGINE),
        sampler=a.sampler or (logged and logged.sampler) or EngineConfig.sampler,
        moe_backend=a.moe_backend or (logged and logged.moe_backend) or EngineConfig.moe_backend,
    )
    return Deployment(**values(a, Deployment), engine=engine, speculative=_speculative(a))


def workload(a: argparse.Namespace) -> Workload:
    """The requests the options describe: lengths, images, prefix cache, turns."""
    return Workload(**values(a, Workload))


def run(a: argparse.Namespace) -> int:
    logged = read_startup_log(a.startup_log) if a.startup_log else None
    est = estimate_for(
        deployment(a, logged),
        workload(a),
        SLO(**values(a, SLO, ("ttft_s", "tpot_s"))),
        OperatingPoint(concurrency=a.concurrency, request_rate=a.request_rate),
        coefficients=a.coefficients,
    )
    if a.json:
        out = estimate_to_dict(est)
        if logged is not None:
            out["startup_log"] = dataclasses.asdict(logged)
        print(json.dumps(out, indent=2))
        return 0
    if logged is not None:
        print(compare_text(logged, est.memory) + "\n")
    print(format_estimate(est))
    return 0
