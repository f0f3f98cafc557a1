"""A capacity plan as the planner returns it: the options ranked by cost, the ones rejected and
why, the notes; its columns, its text and the short descriptions notebooks and pages use.

Columns (``PLAN_COLUMNS``): each option's split and formats, ``replicas`` (serving + spares),
``total_gpus``, the capacity of one replica within the SLOs in the target's own unit
(``capacity_requests_per_s`` for request-rate and output-token targets,
``capacity_concurrency`` for concurrency targets; the other is NaN), ``utilization`` (arrivals
over the service rate at target), TTFT and TPOT at target (the SLO statistic), the link's share
of a decode step and the costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import GPU

TARGETS = ("request_rate", "concurrency", "output_tps")
PLAN_COLUMNS = [
    "gpu",
    "gpus_per_replica",
    "tp",
    "pp",
    "ep",
    "weight_dtype",
    "kv_dtype",
    "replicas",
    "spare_replicas",
    "total_gpus",
    "capacity_requests_per_s",
    "capacity_concurrency",
    "utilization",
    "ttft_s",
    "tpot_s",
    "comm_share",
    "cost_per_hour",
    "cost_per_million_output_tokens",
]


@dataclass(frozen=True)
class Target:
    """What the fleet must carry: requests/s, requests in flight, or output tokens/s."""

    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in TARGETS:
            raise ValueError(f"target kind must be one of {', '.join(TARGETS)}, got {self.kind!r}")
        if not (math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"target {self.kind} must be a positive number, got {self.value!r}")

    @classmethod
    def one_of(cls, **given: float | None) -> Target:
        """The one target among ``request_rate``, ``concurrency`` and ``output_tps`` that is not
        None; an error when none or several are given."""
        chosen = [(k, v) for k, v in given.items() if v is not None]
        if len(chosen) != 1:
            raise ValueError("give exactly one target: a request rate, a concurrency or output tokens/s")
        return cls(chosen[0][0], float(chosen[0][1]))

    def describe(self) -> str:
        unit = {"request_rate": "requests/s", "concurrency": "concurrent requests", "output_tps": "output tokens/s"}
        return f"{self.value:g} {unit[self.kind]}"


@dataclass
class Plan:
    """Options ranked by cost (``plans``), the ones that failed and why (``rejected``)."""

    model: str
    target: Target
    slo: dict[str, Any]
    plans: pd.DataFrame
    rejected: pd.DataFrame
    searched: int
    search_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> pd.Series | None:
        """The cheapest plan by the queueing model."""
        return None if self.plans.empty else self.plans.iloc[0]

    @property
    def best_checked(self) -> pd.Series | None:
        """The cheapest plan that also meets the SLOs in the step-level simulation, where plans
        were simulated (``simulate_top``); without a simulation, or when none simulated passes,
        the cheapest by the queueing model (``simulation_notes`` says which)."""
        if self.plans.empty or "meets_slo_simulated" not in self.plans:
            return self.best
        ok = self.plans[self.plans["meets_slo_simulated"].eq(True)]
        return ok.iloc[0] if not ok.empty else self.best

    def to_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]

        return {
            "model": self.model,
            "target": {"kind": self.target.kind, "value": self.target.value},
            "slo": self.slo,
            "searched": self.searched,
            "search_s": round(self.search_s, 3),
            "notes": self.notes,
            "plans": records(self.plans),
            "rejected": records(self.rejected),
        }

    def __str__(self) -> str:
        return format_plan(self)

    def describe(self, row: int = 0) -> str:
        """Plan ``row`` (0: the cheapest) in words (``describe_plan``)."""
        return describe_plan(self.plans.iloc[row])

    def _repr_html_(self) -> str:
        head = f"<b>{self.model}</b>: {self.target.describe()}, {self.slo['stat']} TTFT &le; {self.slo['ttft_s']:g} s"
        head += f", {self.slo['stat']} TPOT &le; {self.slo['tpot_s']:g} s; {self.searched} options searched"
        body = self.plans.head(15).to_html(index=False, float_format=lambda v: f"{v:.4g}")
        return f"<p>{head}</p>{body}<p>{len(self.rejected)} rejected (see .rejected)</p>"


def _plain(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


# The columns of a plan a summary table shows (notebook 04), in reading order.
SUMMARY_COLUMNS = [
    "gpu", "gpus_per_replica", "tp", "pp", "weight_dtype", "kv_dtype", "replicas", "total_gpus",
    "capacity_requests_per_s", "capacity_concurrency", "utilization", "ttft_s", "tpot_s", "cost_per_hour", "cost_per_million_output_tokens",
]  # fmt: skip


def describe_split(row: pd.Series | dict[str, Any]) -> str:
    """One replica of a plan or option in words: "2 x H100-SXM-80GB (tp=2, pp=1, fp8 weights, fp8 KV)"."""
    return (
        f"{row['gpus_per_replica']} x {row['gpu']} (tp={row['tp']}, pp={row['pp']}, {row['weight_dtype']} weights, "
        f"{row['kv_dtype']} KV)"
    )


def describe_plan(row: pd.Series) -> str:
    """A plan (a row of ``Plan.plans``) in words: replicas, split, GPUs and cost per hour."""
    return f"{row['replicas']} replica(s) of {describe_split(row)} = {row['total_gpus']} GPUs, ${row['cost_per_hour']:,.2f}/hour"


def rejected_counts(result: Plan) -> pd.DataFrame:
    """How many options were rejected for each kind of reason ("does not fit", "misses TPOT",
    "communication-bound", ...: the reason up to its first colon), most frequent first, with the
    first such option (which configuration it was) and its full reason as an example."""
    rej = result.rejected
    reasons = rej["reason"].astype(str)
    kinds = reasons.str.split(":", n=1).str[0]
    counts = kinds.value_counts(sort=False)
    first = [rej[kinds == k].iloc[0] for k in counts.index]
    out = pd.DataFrame(
        {
            "reason": counts.index,
            "options": counts.to_numpy(),
            "example option": [describe_split(r) for r in first],
            "example": [str(r["reason"]) for r in first],
        }
    )
    return out.sort_values("options", ascending=False, kind="stable").reset_index(drop=True)


def too_big_notes(rejected: pd.DataFrame, gpus: Sequence[GPU], plans: pd.DataFrame, most: int) -> list[str]:
    """One note per GPU type on which no option fits the weights at all: the planner searches at
    most ``most`` GPUs per replica (``gpu_counts``; one NVLink/NVSwitch domain), and replicas
    spanning nodes are not modelled, so such a model is out of reach on that GPU, not merely
    expensive."""
    notes = []
    for gpu in gpus:
        if not plans.empty and (plans["gpu"] == gpu.key).any():
            continue
        mine = rejected[rejected["gpu"] == gpu.key]
        if not mine.empty and mine["reason"].astype(str).str.startswith("does not fit").all():
            notes.append(
                f"{gpu.key}: the weights do not fit in any format even on {most} GPUs per replica, the most "
                "searched (gpu_counts); replicas across nodes are not modelled"
            )
    return notes


def simulation_notes(plans: pd.DataFrame) -> list[str]:
    """What the simulation check found, in words."""
    checked = plans[plans["meets_slo_simulated"].notna()]
    if checked.empty or bool(checked.iloc[0]["meets_slo_simulated"]):
        return []
    ok = checked[checked["meets_slo_simulated"].astype(bool)]
    where = f"plan {ok.index[0] + 1} is the cheapest that does" if not ok.empty else "none of them does"
    return [
        "the cheapest plan misses the SLOs in the step-level simulation (which runs each prompt chunk in its "
        f"own step; the queueing model spreads prompts over steps): of the {len(checked)} simulated, {where}"
    ]


def format_plan(p: Plan, top: int = 10) -> str:
    """The plans table (cheapest first), then the rejected options counted by reason."""
    slo = p.slo
    lines = [
        f"{p.model}: {p.target.describe()}, {slo['stat']} TTFT <= {slo['ttft_s']:g} s, "
        f"{slo['stat']} TPOT <= {slo['tpot_s'] * 1e3:g} ms ({p.searched} options in {p.search_s:.1f} s)",
        "",
    ]
    if p.plans.empty:
        lines.append("no option carries the target within the SLOs")
    else:
        lines.append(
            f"{'gpu':<16}{'gpus':>5}{'tp':>4}{'pp':>4}{'ep':>4} {'weights':<8}{'kv':<6}{'replicas':>9}{'total':>7}"
            f"{'util':>6}{'TTFT s':>8}{'TPOT ms':>9}{'$/hour':>9}{'$/M out':>9}"
        )
        for r in p.plans.head(top).itertuples():
            lines.append(
                f"{r.gpu:<16}{r.gpus_per_replica:>5}{r.tp:>4}{r.pp:>4}{r.ep:>4} {r.weight_dtype:<8}{r.kv_dtype:<6}"
                f"{f'{r.replicas - r.spare_replicas}+{r.spare_replicas}':>9}{r.total_gpus:>7}{r.utilization:>6.0%}{r.ttft_s:>8.3g}"
                f"{r.tpot_s * 1e3:>9.3g}{r.cost_per_hour:>9.2f}{r.cost_per_million_output_tokens:>9.3g}"
            )
        if "ttft_s_simulated" in p.plans:
            lines += ["", f"checked by simulation ({slo['stat']}, at target with the spares out):"]
            for r in p.plans.itertuples():  # every simulated plan, also below --top
                if isinstance(getattr(r, "simulation_error", None), str):
                    lines.append(
                        f"  {r.Index + 1:>3}. {r.gpu} tp={r.tp} pp={r.pp}: not simulated ({r.simulation_error})"
                    )
                    continue
                if r.meets_slo_simulated is None:
                    continue
                verdict = "meets the SLOs" if r.meets_slo_simulated else "MISSES the SLOs"
                lines.append(
                    f"  {r.Index + 1:>3}. {r.gpu} tp={r.tp} pp={r.pp} {r.weight_dtype}/{r.kv_dtype}: "
                    f"TTFT {r.ttft_s_simulated:.3g} s, TPOT {r.tpot_s_simulated * 1e3:.3g} ms: {verdict}"
                )
        if len(p.plans) > top:
            lines.append(f"... {len(p.plans) - top} more")
        lines.append("replicas: serving + spares; util, TTFT, TPOT at target with the spares out")
    if not p.rejected.empty:
        lines += ["", f"rejected ({len(p.rejected)}):"]
        kinds = p.rejected["reason"].str.split(":").str[0].value_counts()
        for kind, n in kinds.items():
            example = p.rejected[p.rejected["reason"].str.startswith(str(kind))].iloc[0]
            where = f"{example['gpu']} x{example['gpus_per_replica']} tp={example['tp']}"
            lines.append(f"  {n:>4}  {kind}  (e.g. {where}: {example['reason'].split(':', 1)[-1].strip()[:110]})")
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)
