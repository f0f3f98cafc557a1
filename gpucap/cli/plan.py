"""``gpucap plan``: the cheapest fleet for a target load within SLOs (``gpucap.planning.search``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucap.cli.common import Prices, add_coefficients, add_json, add_parallel, parallel_runner
from gpucap.cli.fields import add_options, values
from gpucap.config import SLO, Deployment, EngineConfig
from gpucap.options import option
from gpucap.planning.capacity import Headroom
from gpucap.planning.commands import VerifyCommands, plan_commands
from gpucap.planning.result import Plan, Target
from gpucap.planning.search import Search, plan_for
from gpucap.queueing.lengths import Lengths
from gpucap.queueing.loads import Load

EXIT_NOTHING_FITS = 3
SEARCH = ("gpus", "gpu_counts", "weight_dtypes", "kv_dtypes")  # the search space's fields offered as options


@dataclass(frozen=True)
class PlanTarget:
    """The load ``gpucap plan`` sizes the fleet for: one of three, all replicas together."""

    target_rps: float | None = option(None, kind="positive_float", help="requests per second, all replicas")
    target_concurrency: float | None = option(None, kind="positive_float", help="requests in flight, all replicas")
    target_output_tps: float | None = option(None, kind="positive_float", help="output tokens per second, all replicas")


@dataclass(frozen=True)
class PlanOptions:
    """``gpucap plan``'s own options; the config objects' fields it takes are offered from their
    declarations."""

    input_len: str | None = option(None, help="tokens: 2000, or percentiles p50=800,p90=2000,p99=6000")
    output_len: str | None = option(None, help="tokens: 300, or percentiles p50=200,p99=1000")
    trace: str | None = option(
        None,
        help="a recorded trace (CSV / JSON lines: arrival time, input and output tokens; or vllm bench serve "
        "--save-detailed JSON) in place of a target and lengths: the cheapest option is sized by replaying it",
    )
    disaggregated: str | None = option(
        None,
        metavar="LINK",
        help="also compare separate prefill and decode pools, the KV cache moving over LINK (nvlink, nic-400g, "
        "nic-200g: data/links.csv); needs --target-rps, at mean lengths and mean latencies",
    )
    router: str = option("round_robin", choices=("round_robin", "least_outstanding"), help="with --trace")
    replay_replicas: int | None = option(
        None,
        kind="positive_int",
        help="with --trace: replay only N replicas' shares (faster for long traces; default all)",
    )
    simulate_top: int | None = option(
        None,
        kind="count",
        help="check plans by simulation: by default from the cheapest until one meets the SLOs (recommended), then "
        "every plan up to 25% dearer; N: at least the N cheapest too; 0: no check, nothing recommended",
    )
    top: int = option(10, kind="positive_int", help="plans to print (default 10; --json prints all)")
    no_commands: bool = option(
        False,
        kind="switch",
        help="do not print the commands that verify the recommended plan (serve, load-test sweep, calibrate, re-plan)",
    )
    served_model: str | None = option(
        None, help="the checkpoint the verify commands serve (Hugging Face id or path; default the --model catalog id)"
    )
    results_dir: str = option("results", help="where the verify commands' load tests save (default results)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="GPU type, count, split, replicas and cost for a target load within SLOs")
    add_options(p, Deployment, ("model",))
    add_options(p.add_mutually_exclusive_group(), PlanTarget)
    add_options(p, PlanOptions, ("input_len", "output_len", "trace", "disaggregated", "router", "replay_replicas"))
    add_options(
        p, SLO, defaults={"statistic": "p99"}, helps={"statistic": "the statistic both SLOs apply to (default p99)"}
    )
    add_options(p, Search, SEARCH)
    add_options(p, Prices)
    add_options(p, Headroom)
    add_options(p, Load, ("burstiness",), helps={"burstiness": "gamma arrivals' shape; 1 = Poisson, < 1 burstier"})
    add_options(p, EngineConfig, ("engine",))
    add_coefficients(p)
    add_options(p, Deployment, ("gpu_file",))
    add_options(p, PlanOptions, ("simulate_top",))
    add_parallel(p, "the simulation checks and a trace's replays")
    add_options(p, PlanOptions, ("top", "no_commands", "served_model", "results_dir"))
    add_json(p, 'the plans and the options rejected, cheapest first ({"plans": [...], "rejected": [...]}),')


def slo(a: argparse.Namespace) -> SLO:
    """The SLOs the options give, at their statistic."""
    return SLO(**values(a, SLO))


def search(a: argparse.Namespace) -> Search:
    """The search space the options give: GPUs, GPUs per replica, formats, engine, extra GPUs."""
    return Search(**values(a, Search, SEARCH), engine=a.engine, gpu_file=a.gpu_file)


def target(a: argparse.Namespace) -> Target:
    """The one target the options give."""
    return Target.one_of(request_rate=a.target_rps, concurrency=a.target_concurrency, output_tps=a.target_output_tps)


def run(a: argparse.Namespace) -> int:
    if a.trace:
        return run_trace(a)
    if not (a.target_rps or a.target_concurrency or a.target_output_tps) or not (a.input_len and a.output_len):
        raise ValueError(
            "give a target (--target-rps, --target-concurrency or --target-output-tps) with --input-len and "
            "--output-len, or a --trace"
        )
    result = plan_for(
        a.model,
        target(a),
        slo(a),
        input_len=Lengths.parse(a.input_len, "--input-len"),
        output_len=Lengths.parse(a.output_len, "--output-len"),
        search=search(a),
        prices=a.price,
        usd_per_kwh=a.usd_per_kwh,
        coefficients=a.coefficients,
        headroom=Headroom(**values(a, Headroom)),
        burstiness=a.burstiness,
        progress=not a.json and sys.stderr.isatty(),
        check=a.simulate_top != 0,
        simulate_top=a.simulate_top or 0,
        n_jobs=parallel_runner(a),
    )
    commands = None if a.no_commands or result.plans.empty else verify(result, a)
    if a.json:
        out = result.to_dict()
        if commands is not None:
            out["verify"] = dataclasses.asdict(commands)
        print(json.dumps(out, indent=1))
    else:
        from gpucap.planning.result import format_plan

        print(format_plan(result, top=a.top))
        if commands is not None:
            print()
            print(commands.text(), end="")
    if a.disaggregated:
        print_disaggregated(a, Lengths.parse(a.input_len, "--input-len"), Lengths.parse(a.output_len, "--output-len"))
    return 0 if not result.plans.empty else EXIT_NOTHING_FITS


def verify(result: Plan, a: argparse.Namespace) -> VerifyCommands:
    """The commands that verify the recommended plan (the cheapest where nothing is recommended)."""
    return plan_commands(result, model_id=a.served_model, result_dir=a.results_dir)


def print_disaggregated(a: argparse.Namespace, inp: Lengths, out: Lengths) -> None:
    """``--disaggregated LINK``: per GPU and format, aggregated serving against prefill/decode pools."""
    from gpucap.planning.disagg import compare_disaggregated

    if not a.target_rps:
        raise ValueError("--disaggregated compares pools for a request rate: give --target-rps")
    print(f"\naggregated against disaggregated (mean TTFT and TPOT, mean lengths, KV over {a.disaggregated}):")
    for gpu in a.gpus:
        for wd in a.weight_dtypes:
            table, notes = compare_disaggregated(
                a.model,
                gpu,
                rate=a.target_rps,
                input_len=inp.mean,
                output_len=out.mean,
                ttft_slo_s=a.ttft_s,
                tpot_slo_s=a.tpot_s,
                weight_dtype=wd,
                link=a.disaggregated,
                engine=a.engine,
                prices=a.price,
            )
            for _, r in table.iterrows():
                print(
                    f"  {gpu} {wd} {r['serving']:<14}{r['pools']:<26}{r['gpus']:>5} GPUs {r['usd_per_hour']:>9.2f} $/h  "
                    f"TTFT {r['ttft_s']:.3g} s (KV transfer {r['kv_transfer_s'] * 1e3:.3g} ms)  TPOT {r['tpot_s'] * 1e3:.3g} ms"
                )
            if table.empty:
                print(f"  {gpu} {wd}: neither way meets the SLOs")
            for n in notes:
                print(f"    {n}")


def trace_progress(row: dict[str, Any], seconds: float) -> None:
    """One line on stderr for each replica count the trace was replayed at."""
    ttft, tpot = row["ttft_s"], row["tpot_s"]
    print(
        f"  replayed at {row['replicas']} replica(s): TTFT {ttft:.3g} s, TPOT {tpot * 1e3:.3g} ms, "
        f"{'meets' if row['meets'] else 'misses'} ({seconds:.0f} s so far)",
        file=sys.stderr,
        flush=True,
    )


def run_trace(a: argparse.Namespace) -> int:
    """``--trace``: the analytic plan for the trace's mean rate, lengths and burstiness (no spares,
    no burst margin: the trace is the traffic), then its cheapest option sized by replay."""
    from gpucap.config import EngineConfig, hardware
    from gpucap.physics.coefficients import Coefficients
    from gpucap.planning.trace import burstiness, read_trace, size_trace, trace_lengths

    if a.target_rps or a.target_concurrency or a.target_output_tps or a.input_len or a.output_len:
        raise ValueError("--trace gives the target and the lengths: leave out --target-* and --input-len/--output-len")
    trace = read_trace(a.trace)
    if trace.duration_s <= 0:
        raise ValueError(
            f"{a.trace}: its {trace.arrival_s.size} request(s) all arrive at {trace.arrival_s[0]:g} s; a trace to size "
            "from needs arrivals spread over time (for a burst sent at once, plan with --target-concurrency)"
        )
    shape = burstiness(trace)
    result = plan_for(
        a.model,
        Target("request_rate", trace.mean_rate),
        slo(a),
        input_len=trace_lengths(trace.input_len, "trace"),
        output_len=trace_lengths(trace.output_len, "trace"),
        search=search(a),
        prices=a.price,
        usd_per_kwh=a.usd_per_kwh,
        coefficients=a.coefficients,
        headroom=Headroom(0, 0, 0.0),
        burstiness=shape,
    )
    print(
        f"{a.trace}: {trace.arrival_s.size:,} requests over {trace.duration_s:,.0f} s ({trace.mean_rate:.3g}/s, "
        f"burstiness {shape:.2g}); input mean {trace.input_len.mean():,.0f}, output mean {trace.output_len.mean():,.0f}"
    )
    if result.plans.empty:
        print("no option carries the trace's mean rate within the SLOs (see `gpucap plan` without --trace for why)")
        return EXIT_NOTHING_FITS
    best = result.plans.iloc[0]
    hw = hardware(
        a.model,
        str(best["gpu"]),
        tp=int(best["tp"]),
        pp=int(best["pp"]),
        weight_dtype=str(best["weight_dtype"]),
        kv_dtype=str(best["kv_dtype"]),
        engine=EngineConfig(engine=a.engine),
        gpu_file=a.gpu_file,
    )
    coef = Coefficients.resolve(a.coefficients, a.engine)
    sizing = size_trace(
        hw,
        coef,
        trace,
        slo(a),
        router=a.router,
        start=int(best["replicas"]),
        replay_replicas=a.replay_replicas,
        progress=None if a.json else trace_progress,
        n_jobs=parallel_runner(a),
    )
    option = f"{best['gpu']} x {int(best['gpus_per_replica'])} (tp={int(best['tp'])}, {best['weight_dtype']})"
    print(f"cheapest option: {option}")
    print(f"  analytic plan (mean rate, trace's lengths and burstiness): {int(best['replicas'])} replicas")
    found = "none within the search" if sizing.replicas is None else f"{sizing.replicas} replicas"
    print(
        f"  replaying the trace ({a.router}, {a.statistic} TTFT <= {a.ttft_s:g} s, TPOT <= {a.tpot_s * 1e3:g} ms): {found}"
    )
    for _, r in sizing.tried.iterrows():
        if not np.isfinite(r["ttft_s"]):
            print(
                f"    {int(r['replicas']):>4} replicas: misses (more than the SLO allows are late; replay stopped early)"
            )
            continue
        verdict = "meets" if r["meets"] else "misses"
        print(
            f"    {int(r['replicas']):>4} replicas: {a.statistic} TTFT {r['ttft_s']:.3g} s, TPOT {r['tpot_s'] * 1e3:.3g} ms: {verdict}"
        )
    print(f"  ({sizing.seconds:.1f} s; add spares for failures and upgrades on top)")
    return 0 if sizing.replicas is not None else EXIT_NOTHING_FITS
