"""``gpucap frontier``: output tokens/s per GPU against tokens/s per user, and the Pareto front
across GPUs, splits and formats (``gpucap.planning.interactivity``)."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import Any

from gpucap.cli.common import Prices, add_coefficients, add_json
from gpucap.cli.fields import add_options
from gpucap.config import SLO, Deployment, EngineConfig, Workload
from gpucap.options import option
from gpucap.physics.coefficients import Coefficients
from gpucap.planning.interactivity import interactivity_frontier


@dataclass(frozen=True)
class FrontierOptions:
    """``gpucap frontier``'s own options: what it sweeps, and whether it prints every point."""

    gpus: tuple[str, ...] = option(kind="names", help="GPU keys, comma-separated (see `gpucap gpus`)")
    tp: tuple[int, ...] = option((1, 2, 4, 8), kind="positive_ints", help="tensor-parallel sizes to try (1,2,4,8)")
    weight_dtypes: tuple[str, ...] | None = option(
        None, kind="names", help="formats to try (default: the checkpoint's)"
    )
    all: bool = option(False, kind="switch", help="print every point, not only the Pareto front")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("frontier", help="tokens/s per GPU against tokens/s per user, and the Pareto front")
    add_options(p, Deployment, ("model",))
    add_options(p, FrontierOptions, ("gpus", "tp", "weight_dtypes"))
    add_options(p, Workload, ("input_len", "output_len"))
    add_options(
        p, SLO, ("ttft_s",), defaults={"ttft_s": None}, helps={"ttft_s": "seconds; points above it leave the front"}
    )
    add_options(p, Workload, ("lengths",))
    add_options(p, EngineConfig, ("engine",))
    add_coefficients(p)
    add_options(p, Prices, ("price",))
    add_options(p, Deployment, ("gpu_file",))
    add_options(p, FrontierOptions, ("all",))
    add_json(p, "every point (records)")


def run(a: argparse.Namespace) -> int:
    coef = Coefficients.from_file(a.coefficients, a.engine) if a.coefficients else None
    table, skipped = interactivity_frontier(
        a.model,
        a.gpus,
        input_len=a.input_len,
        output_len=a.output_len,
        tp=a.tp,
        weight_dtypes=a.weight_dtypes or (None,),
        engine=EngineConfig(engine=a.engine),
        ttft_slo_s=a.ttft_s or math.inf,
        lengths=a.lengths,
        coefficients=coef,
        prices=a.price,
        gpu_file=a.gpu_file,
    )
    if a.json:
        print(json.dumps({"points": json.loads(table.to_json(orient="records")), "skipped": skipped}, indent=1))
        return 0
    shown = table if a.all else table[table["pareto"]]
    shown = shown.sort_values("tokens_per_s_per_user", ascending=False)
    print(
        f"{'gpu':<20}{'tp':>3} {'format':<7}{'in flight':>10}{'tok/s/user':>11}{'tok/s/GPU':>11}"
        f"{'TTFT s':>8}{'$/M tok':>9}"
    )
    for _, r in shown.iterrows():
        usd = r["usd_per_million_output_tokens"]
        print(
            f"{r['gpu']:<20}{r['tp']:>3} {r['weight_dtype']:<7}{r['concurrency']:>10,.0f}{r['tokens_per_s_per_user']:>11,.1f}"
            f"{r['tokens_per_s_per_gpu']:>11,.0f}{r['ttft_s']:>8.3g}{usd if usd == usd else float('nan'):>9.3g}"
        )
    label = "every point" if a.all else "the Pareto front"
    print(f"{len(shown)} points ({label}) of {len(table)}; left out: {len(skipped)} option(s)")
    for s in skipped:
        print(f"  {s}")
    return 0
