"""A capacity plan as the planner returns it: the options ranked by cost, the ones rejected and
why, the notes; its columns, its text and the short descriptions notebooks and pages use.

Columns (``PLAN_COLUMNS``): each option's split and formats, ``replicas`` (serving + spares),
``total_gpus``, the capacity of one replica within the SLOs in the target's own unit
(``capacity_requests_per_s`` for request-rate and output-token targets,
``capacity_concurrency`` for concurrency targets; the other is NaN), ``utilization`` (arrivals
over the service rate at target), TTFT and TPOT at target (the SLO statistic), the link's share
of a decode step and the costs. Every plan also carries ``plan``, its number in every table and
note (``number_plans``: KV-format twins share one), and ``recommended``; where the simulation
check ran (``gpucap.planning.checks``), ``ttft_s_simulated``, ``tpot_s_simulated``,
``meets_slo_simulated`` (None where not simulated) and ``simulation_error``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpucap.catalog.gpus import GPU
from gpucap.config import SLO, Hardware
from gpucap.queueing.lengths import Lengths

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
    """Options ranked by cost (``plans``), the ones that failed and why (``rejected``), and the
    seconds the search (``search_s``) and the simulation check (``check_s``, 0 without one) took.
    ``slo``, ``burstiness``, ``input_len``, ``output_len`` and ``engine``: the question's SLOs,
    arrivals (1: Poisson), lengths and engine;
    ``row_hardware``: the ``Hardware`` of one replica of a row, as the planner built it (for the
    commands that verify a plan, ``gpucap.planning.commands.plan_commands``)."""

    model: str
    target: Target
    slo: SLO
    plans: pd.DataFrame
    rejected: pd.DataFrame
    searched: int
    search_s: float
    notes: list[str] = field(default_factory=list)
    check_s: float = 0.0
    input_len: Lengths | None = None
    output_len: Lengths | None = None
    engine: str = "vllm"
    burstiness: float = 1.0
    row_hardware: Callable[[pd.Series], Hardware] | None = field(default=None, repr=False, compare=False)

    @property
    def best(self) -> pd.Series | None:
        """The cheapest plan by the queueing model (not necessarily checked: see ``recommended``)."""
        return None if self.plans.empty else self.plans.iloc[0]

    @property
    def recommended(self) -> pd.Series | None:
        """The plan to buy: the cheapest that meets the SLOs in the step-level simulation (every
        cheaper plan was simulated and misses). None where nothing was simulated
        (``plan(..., check=False)``, concurrency targets) or nothing simulated passes."""
        if "recommended" not in self.plans:
            return None
        chosen = self.plans[self.plans["recommended"].astype(bool)]
        return None if chosen.empty else chosen.iloc[0]

    @property
    def simulated(self) -> int:
        """How many plans the simulation check ran (0 without one)."""
        if "meets_slo_simulated" not in self.plans:
            return 0
        return int((self.plans["meets_slo_simulated"].notna() | self.plans["simulation_error"].notna()).sum())

    @property
    def best_checked(self) -> pd.Series | None:
        """``recommended`` where there is one, else the cheapest by the queueing model (kept for
        code written before ``recommended``)."""
        chosen = self.recommended
        return self.best if chosen is None else chosen

    def to_dict(self) -> dict[str, Any]:
        def records(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]

        return {
            "model": self.model,
            "target": {"kind": self.target.kind, "value": self.target.value},
            "slo": {
                "ttft_s": self.slo.ttft_s,
                "tpot_s": self.slo.tpot_s,
                "stat": self.slo.statistic,
                "burstiness": self.burstiness,
            },
            "searched": self.searched,
            "search_s": round(self.search_s, 3),
            "check_s": round(self.check_s, 3),
            "recommended": None if self.recommended is None else int(self.recommended["plan"]),
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
        head = f"<b>{self.model}</b>: {self.target.describe()}, {self.slo.statistic} TTFT &le; {self.slo.ttft_s:g} s"
        head += f", {self.slo.statistic} TPOT &le; {self.slo.tpot_s:g} s; {self.searched} options searched"
        rec = "<br>".join(recommended_lines(self))
        shown = self.plans.head(15).drop(columns=["meets_slo_simulated", "simulation_error"], errors="ignore")
        shown = shown.assign(check=check_state(self.plans.head(15)))
        body = shown.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")
        return f"<p>{head}</p><p>{rec}</p>{body}<p>{len(self.rejected)} rejected (see .rejected)</p>"


def _plain(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


# The columns of a plan a summary table shows (notebook 04), in reading order.
SUMMARY_COLUMNS = [
    "plan", "gpu", "gpus_per_replica", "tp", "pp", "weight_dtype", "kv_dtype", "replicas", "total_gpus",
    "capacity_requests_per_s", "capacity_concurrency", "utilization", "ttft_s", "tpot_s", "cost_per_hour", "cost_per_million_output_tokens",
]  # fmt: skip
# Plans that differ only in the KV cache format and tie on all of these (and on the simulation's
# verdict) are twins: one plan number, one row on the page (``gpucap.app.planwidgets.group_twins``).
TWIN_KEYS = ["gpu", "gpus_per_replica", "tp", "pp", "ep", "weight_dtype", "replicas", "total_gpus", "cost_per_hour"]
NOT_CHECKED = "not checked"
CLIP = 110  # characters of a rejection reason the CLI prints, cut at a word


def check_state(plans: pd.DataFrame) -> pd.Series:
    """Each plan's simulation check in words: "meets", "misses", "not simulated" (it could not
    run: ``simulation_error``) or ``NOT_CHECKED`` (never None or NaN)."""
    if "meets_slo_simulated" not in plans:
        return pd.Series(NOT_CHECKED, index=plans.index, dtype=object)
    errors = plans["simulation_error"] if "simulation_error" in plans else pd.Series(None, index=plans.index)
    return pd.Series(
        [
            "not simulated" if isinstance(err, str) else NOT_CHECKED if ok is None else "meets" if ok else "misses"
            for ok, err in zip(plans["meets_slo_simulated"], errors, strict=True)
        ],
        index=plans.index,
        dtype=object,
    )


def number_plans(plans: pd.DataFrame) -> pd.DataFrame:
    """``plans`` (ranked by cost) with a ``plan`` column, 1 for the cheapest, the number every
    table and note quotes. KV-format twins (equal ``TWIN_KEYS`` and check) share a number and
    are moved next to the first of them (they cost the same: the ranking by cost holds)."""
    out = plans.drop(columns="plan", errors="ignore")
    if out.empty:
        return out.assign(plan=pd.Series(dtype=int))
    key = out[TWIN_KEYS].assign(check=check_state(out))
    number = key.groupby(list(key.columns), sort=False, dropna=False).ngroup().to_numpy() + 1
    out.insert(0, "plan", number)
    return out.sort_values("plan", kind="stable").reset_index(drop=True)


def summary_table(plans: pd.DataFrame) -> pd.DataFrame:
    """``plans`` in ``SUMMARY_COLUMNS`` with the simulation check in words (``check``,
    ``check_state``) and, where it ran, its TTFT and TPOT; "not checked" where it did not (the
    tables of notebook 04: never None or NaN for a plan the simulation skipped)."""
    out = plans[[c for c in SUMMARY_COLUMNS if c in plans]].assign(check=check_state(plans))
    if "ttft_s_simulated" in plans:
        ran = plans["ttft_s_simulated"].notna()
        for col in ("ttft_s_simulated", "tpot_s_simulated"):
            out[col] = plans[col].astype(object).where(ran, NOT_CHECKED)
    return out


def describe_split(row: pd.Series | dict[str, Any]) -> str:
    """One replica of a plan or option in words: "2 x H100-SXM-80GB (tp=2, pp=1, fp8 weights, fp8 KV)"."""
    return (
        f"{row['gpus_per_replica']} x {row['gpu']} (tp={row['tp']}, pp={row['pp']}, {row['weight_dtype']} weights, "
        f"{row['kv_dtype']} KV)"
    )


def describe_plan(row: pd.Series) -> str:
    """A plan (a row of ``Plan.plans``) in words: replicas, split, GPUs and cost per hour."""
    return f"{row['replicas']} replica(s) of {describe_split(row)} = {row['total_gpus']} GPUs, ${row['cost_per_hour']:,.2f}/hour"


def recommended_lines(p: Plan) -> list[str]:
    """The recommendation: the plan and its simulated latencies against the SLOs (two lines); or
    why there is none (one line)."""
    rec, slo = p.recommended, p.slo
    if rec is not None:
        stat = slo.statistic
        tpot = "no TPOT (one output token)" if math.isnan(rec["tpot_s_simulated"]) else (
            f"{stat} TPOT {rec['tpot_s_simulated'] * 1e3:.3g} ms (SLO {slo.tpot_s * 1e3:g} ms)"
        )  # fmt: skip
        return [
            f"recommended: plan {rec['plan']}, {describe_plan(rec)}",
            f"  simulated {stat} TTFT {rec['ttft_s_simulated']:.3g} s (SLO {slo.ttft_s:g} s), {tpot}: the "
            "cheapest plan that meets the SLOs in simulation",
        ]
    if p.plans.empty:
        return ["recommended: none: no option carries the target within the SLOs"]
    if p.simulated:
        return [f"recommended: none: none of the {p.simulated} plans simulated meets the SLOs in simulation"]
    return ["recommended: none: not checked by simulation; plan 1 is the cheapest by the queueing model alone"]


def rejected_counts(result: Plan) -> pd.DataFrame:
    """How many options were rejected for each kind of reason ("does not fit", "misses TPOT",
    "communication-bound", ...: the reason up to its first colon), most frequent first, with an
    example of each (which configuration it was, and its full reason): for "does not fit" the
    nearest miss, the option short by the fewest GiB per GPU (``short_GiB``); else the first."""
    rej = result.rejected
    reasons = rej["reason"].astype(str)
    kinds = reasons.str.split(":", n=1).str[0]
    counts = kinds.value_counts(sort=False)
    short = rej["short_GiB"].astype(float) if "short_GiB" in rej else pd.Series(np.nan, index=rej.index)
    examples = []
    for k in counts.index:
        mine = short[kinds == k]
        examples.append(rej.loc[mine.idxmin()] if mine.notna().any() else rej[kinds == k].iloc[0])
    out = pd.DataFrame(
        {
            "reason": counts.index,
            "options": counts.to_numpy(),
            "example option": [describe_split(r) for r in examples],
            "example": [str(r["reason"]) for r in examples],
            "short_GiB": [float(r["short_GiB"]) if "short_GiB" in r else math.nan for r in examples],
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
                "searched (GPUs per replica); replicas across nodes are not modelled"
            )
    return notes


def simulation_notes(plans: pd.DataFrame) -> list[str]:
    """What the simulation check found, in words, plans named by their ``plan`` number: where the
    cheapest misses the SLOs in simulation, which is the cheapest that meets them."""
    checked = plans[plans["meets_slo_simulated"].notna()]
    if checked.empty or bool(checked.iloc[0]["meets_slo_simulated"]):
        return []
    ok = checked[checked["meets_slo_simulated"].astype(bool)]
    where = f"plan {ok['plan'].iloc[0]} is the cheapest that does" if not ok.empty else "none of them does"
    return [
        "the cheapest plan misses the SLOs in the step-level simulation (which runs each prompt chunk in its "
        f"own step; the queueing model spreads prompts over steps): of the {len(checked)} simulated, {where}"
    ]


def clip(text: str, limit: int = CLIP) -> str:
    """``text`` cut to about ``limit`` characters at a clause (``;``, ``,``, `` (``) or else a
    word boundary, never inside a number or word, with "..." where cut."""
    if len(text) <= limit:
        return text
    room = text[: limit + 1]
    for sep in ("; ", ", ", " ("):
        at = room.rfind(sep)
        if at > limit // 2:
            return text[:at].rstrip() + " ..."
    at = room.rfind(" ")
    return (text[:at] if at > 0 else text).rstrip() + " ..."


def _check_cells(r: Any) -> list[str]:
    """The simulation's verdict, TTFT s and TPOT ms of a plans row (blank where not simulated)."""
    state = getattr(r, "check", NOT_CHECKED)
    if state != "meets" and state != "misses":
        return [state, "", ""]
    tpot = r.tpot_s_simulated * 1e3
    return [
        "meets" if state == "meets" else "MISSES",
        f"{r.ttft_s_simulated:.3g}",
        "-" if math.isnan(tpot) else f"{tpot:.3g}",
    ]


def aligned(rows: list[list[str]], aligns: str) -> list[str]:
    """Rows of cells as text columns, each as wide as its widest cell (a header included) and
    one space apart: ``aligns`` gives each column ``<`` (left) or ``>`` (right)."""
    widths = [max(len(row[k]) for row in rows) for k in range(len(aligns))]
    return [" ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, aligns, widths, strict=True)).rstrip() for row in rows]


def format_plan(p: Plan, top: int = 10) -> str:
    """The recommendation first (``recommended_lines``), then the plans table cheapest first with
    each plan's number and simulation check (``>`` marks the recommended one; "not checked"
    where the simulation did not run), then the rejected options counted by reason with the
    nearest miss, and the notes."""
    slo = p.slo
    lines = [
        f"{p.model}: {p.target.describe()}, {slo.statistic} TTFT <= {slo.ttft_s:g} s, "
        f"{slo.statistic} TPOT <= {slo.tpot_s * 1e3:g} ms ({p.searched} options in {p.search_s:.1f} s"
        + (f"; {p.simulated} simulated in {p.check_s:.1f} s)" if p.simulated else ")"),
        "",
        *recommended_lines(p),
        "",
    ]
    if not p.plans.empty:
        plans = p.plans.assign(check=check_state(p.plans))
        if "plan" not in plans:
            plans = number_plans(plans)
        rec = p.recommended
        shown = max(top, int(plans.index[plans["recommended"]][0]) + 1 if rec is not None else 0)
        header = ["", "plan", "gpu", "gpus", "tp", "pp", "ep", "weights", "kv", "replicas", "total", "util", "TTFT s",
                  "TPOT ms", "$/hour", "$/M out", "simulated", "TTFT s", "TPOT ms"]  # fmt: skip
        rows = [header]
        for r in plans.head(shown).itertuples():
            rows.append(
                [
                    ">" if getattr(r, "recommended", False) else "", str(r.plan), str(r.gpu), str(r.gpus_per_replica),
                    str(r.tp), str(r.pp), str(r.ep), str(r.weight_dtype), str(r.kv_dtype),
                    f"{r.replicas - r.spare_replicas}+{r.spare_replicas}", str(r.total_gpus), f"{r.utilization:.0%}",
                    f"{r.ttft_s:.3g}", "-" if math.isnan(r.tpot_s) else f"{r.tpot_s * 1e3:.3g}",
                    f"{r.cost_per_hour:,.2f}", f"{r.cost_per_million_output_tokens:.3g}", *_check_cells(r),
                ]
            )  # fmt: skip
        lines += aligned(rows, "<><>>>><<>>>>>>><>>")
        more = plans.iloc[shown:]
        if not more.empty:
            sim = int((more["check"] != NOT_CHECKED).sum())
            lines.append(f"... {len(more)} more" + (f" ({sim} of them simulated; --top to see them)" if sim else ""))
        lines.append(
            "replicas: serving + spares; util, TTFT, TPOT at target with the spares out, by the queueing model "
            f"(left) and by the simulation ({slo.statistic}, right); > recommended; one plan number: KV formats that tie"
        )
    counts = rejected_counts(p) if not p.rejected.empty else pd.DataFrame()
    if not counts.empty:
        lines += ["", f"rejected ({len(p.rejected)}):"]
        for c in counts.to_dict(orient="records"):
            if math.isfinite(c["short_GiB"]):
                example = f"nearest: {c['example option']}, short by {c['short_GiB']:.1f} GiB per GPU"
            else:
                example = f"e.g. {c['example option']}: {clip(c['example'].split(':', 1)[-1].strip())}"
            lines.append(f"  {c['options']:>4}  {c['reason']}  ({example})")
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)
