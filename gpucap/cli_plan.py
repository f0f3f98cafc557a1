"""``gpucap plan``: the cheapest fleet for a target load within SLOs (``gpucap.plan``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .cliargs import count, names, non_negative_float, positive_float, positive_int, positive_ints
from .engine import ENGINES
from .lengths import Lengths
from .plan import GPU_COUNTS, KV_DTYPES, WEIGHT_DTYPES, Headroom, plan
from .queueing import STATS

EXIT_NOTHING_FITS = 3


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="GPU type, count, split, replicas and cost for a target load within SLOs")
    p.add_argument("--model", required=True, help="catalog id (see `gpucap models`) or path to a config.json")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-rps", type=positive_float, help="requests per second, all replicas")
    target.add_argument("--target-concurrency", type=positive_float, help="requests in flight, all replicas")
    target.add_argument("--target-output-tps", type=positive_float, help="output tokens per second, all replicas")
    p.add_argument("--input-len", required=True, help="tokens: 2000, or percentiles p50=800,p90=2000,p99=6000")
    p.add_argument("--output-len", required=True, help="tokens: 300, or percentiles p50=200,p99=1000")
    p.add_argument("--ttft-slo", type=positive_float, default=2.0, help="seconds (default 2)")
    p.add_argument("--tpot-slo", type=positive_float, default=0.1, help="seconds (default 0.1)")
    p.add_argument("--stat", default="p99", choices=list(STATS), help="statistic both SLOs apply to (default p99)")
    p.add_argument("--gpus", type=names, default=["H100-SXM-80GB", "H200-SXM-141GB", "L40S-48GB"])
    p.add_argument(
        "--gpu-counts", type=positive_ints, default=list(GPU_COUNTS), help="GPUs per replica to try (1,2,4,8)"
    )
    p.add_argument("--weight-dtypes", type=names, default=list(WEIGHT_DTYPES))
    p.add_argument("--kv-dtypes", type=names, default=list(KV_DTYPES))
    p.add_argument("--price", default=None, help="CSV gpu,usd_per_gpu_hour (default data/prices.csv)")
    p.add_argument(
        "--usd-per-kwh",
        type=non_negative_float,
        default=None,
        help="owned hardware: count power at each GPU's TDP (plus --price, read as amortized cost, if given)",
    )
    p.add_argument("--failure-spares", type=count, default=1, help="N+k replicas for failures (default 1)")
    p.add_argument("--upgrade-spares", type=count, default=0, help="replicas out during a rolling upgrade (default 0)")
    p.add_argument(
        "--burst-margin", type=non_negative_float, default=0.2, help="capacity above the target, 0.2 = 20%% (default)"
    )
    p.add_argument("--burstiness", type=positive_float, default=1.0, help="gamma arrivals; 1 = Poisson, < 1 burstier")
    p.add_argument("--engine", default="vllm", choices=list(ENGINES))
    p.add_argument("--coefficients", default=None, help="calibration JSON")
    p.add_argument("--gpu-file", default=None, help="CSV of extra GPUs (columns of data/gpus.csv)")
    p.add_argument(
        "--simulate-top", type=count, default=3, help="check the N cheapest plans by simulation (default 3, 0 = off)"
    )
    p.add_argument("--top", type=positive_int, default=10, help="plans to print (default 10; --json prints all)")
    p.add_argument("--json", action="store_true", help='{"plans": [...], "rejected": [...]}, cheapest first')


def run(a: argparse.Namespace) -> int:
    result = plan(
        a.model,
        input_len=Lengths.parse(a.input_len, "--input-len"),
        output_len=Lengths.parse(a.output_len, "--output-len"),
        target_request_rate=a.target_rps,
        target_concurrency=a.target_concurrency,
        target_output_tps=a.target_output_tps,
        ttft_slo_s=a.ttft_slo,
        tpot_slo_s=a.tpot_slo,
        stat=a.stat,
        gpus=a.gpus,
        prices=a.price,
        usd_per_kwh=a.usd_per_kwh,
        gpu_counts=a.gpu_counts,
        weight_dtypes=a.weight_dtypes,
        kv_dtypes=a.kv_dtypes,
        engine=a.engine,
        coefficients=a.coefficients,
        headroom=Headroom(a.failure_spares, a.upgrade_spares, a.burst_margin),
        burstiness=a.burstiness,
        gpu_file=a.gpu_file,
        progress=not a.json and sys.stderr.isatty(),
        simulate_top=a.simulate_top,
    )
    if a.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        from .report import format_plan

        print(format_plan(result, top=a.top))
    return 0 if not result.plans.empty else EXIT_NOTHING_FITS
