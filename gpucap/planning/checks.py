"""The planner's check by simulation: which plans are simulated, the simulations run in parallel,
and the plan recommended.

The queueing model ranks the options by cost (``gpucap.planning.search``); the step-level
simulation (``gpucap.planning.capacity.simulated_run``, about a second each) checks a plan at the
load it puts on one serving replica (the target over the replicas left with the spares out).
The plan **recommended** is the cheapest that meets the SLOs in simulation.

Which plans are simulated (``to_simulate``), cheapest first:

1. every plan, one after the other, until one meets the SLOs (``MAX_SIMULATED`` at most: past
   that nothing is recommended);
2. then every plan that costs at most ``1 + RECOMMEND_WITHIN`` (1.25) times the one that passed,
   so that the alternatives a reader weighs next to the recommendation are checked too;
3. at least the ``minimum`` cheapest (``plan(..., simulate_top=N)``), whatever the rule says.

Every plan cheaper than the recommended one is therefore simulated and misses. The simulations
run where ``gpucap.parallel`` says (every core by default, serially with one job, or a Dask
cluster); each plan's simulation draws its arrivals and lengths from the same fixed seed
(``SEED``) in whichever process runs it, and the rule takes the verdicts in cost order, so the
plans simulated and every number are the same either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpucap.config import SLO, Hardware
from gpucap.parallel import Runner
from gpucap.physics.coefficients import Coefficients
from gpucap.planning.capacity import simulated_run
from gpucap.queueing.lengths import Lengths

RECOMMEND_WITHIN = 0.25  # simulate every plan costing up to 25% more than the cheapest that passes
MAX_SIMULATED = 24  # at ~1 s each: the check gives up (nothing recommended) after this many misses
SEED = 0  # every plan's simulation draws the same arrivals and lengths: results do not depend on order


@dataclass(frozen=True)
class Check:
    """What the simulation found for one plan: the SLO statistic's TTFT and TPOT, whether they
    meet the SLOs, or why the simulation could not run (``error``; then it does not meet them)."""

    ttft_s: float = math.nan
    tpot_s: float = math.nan
    meets: bool = False
    error: str | None = None


@dataclass(frozen=True)
class SimulationJob:
    """One plan's simulation: one replica of it at ``rate`` requests/s, judged against the SLOs."""

    hw: Hardware
    coef: Coefficients
    inp: Lengths
    out: Lengths
    rate: float  # requests/s on one serving replica
    max_running: float
    kv_capacity_tokens: float
    slo: SLO
    burstiness: float

    def run(self) -> Check:
        """The simulation (``gpucap.planning.capacity.simulated_run``) and its verdict at the SLO's statistic.
        One output token has no TPOT: only the TTFT SLO applies."""
        try:
            sim = simulated_run(
                self.hw, self.coef, inp=self.inp, out=self.out, rate=self.rate, max_running=self.max_running,
                kv_capacity_tokens=self.kv_capacity_tokens, burstiness=self.burstiness, seed=SEED,
            )  # fmt: skip
            stat = self.slo.statistic
            ttft, tpot = sim.summary["ttft_s"][stat], sim.summary["tpot_s"][stat]
        except ValueError as err:  # the simulation cannot run this plan: say why, keep the others
            return Check(error=str(err))
        tpot_ok = tpot <= self.slo.tpot_s or (self.out.mean <= 1 and math.isnan(tpot))
        return Check(float(ttft), float(tpot), bool(ttft <= self.slo.ttft_s and tpot_ok))


def _run(job: SimulationJob) -> Check:
    return job.run()


def to_simulate(
    costs: Sequence[float],
    meets: Sequence[bool],
    *,
    minimum: int = 0,
    within: float = RECOMMEND_WITHIN,
    most: int = MAX_SIMULATED,
) -> int:
    """How many of the cheapest plans the check simulates, knowing the verdicts ``meets`` of the
    first ``len(meets)`` (``costs`` ascending, as the plans are ranked): while none passes, one
    more (``most`` at most); once plan ``j`` passes, every plan costing at most
    ``(1 + within) x costs[j]`` (``most`` at most); never fewer than ``minimum``. The check is
    done when the answer is ``len(meets)``."""
    cost = np.asarray(costs, dtype=float)
    passed = next((k for k, ok in enumerate(meets) if ok), None)
    if passed is None:
        need = len(meets) + 1
    else:
        need = int(np.count_nonzero(cost <= (1.0 + within) * cost[passed]))
    return min(max(min(need, most), minimum), len(cost))


def check_plans(
    costs: Sequence[float],
    job: Callable[[int], SimulationJob],
    *,
    minimum: int = 0,
    run: Runner | None = None,
) -> tuple[list[Check], int]:
    """The checks of the first ``to_simulate`` plans (``job(k)``: plan ``k``'s simulation) and how
    many ran at once (1: serially). Where the rule asks for one plan at a time (none has passed
    yet) ``run`` (``gpucap.parallel``; None: serially) takes the next ``run.width`` at once; the
    verdicts are then taken in cost order as the serial rule takes them, and the ones it would
    not have reached are dropped."""
    run = run or Runner()
    width = run.width
    done: list[Check] = []
    at_once = 1
    while (need := to_simulate(costs, [c.meets for c in done], minimum=minimum)) > len(done):
        limit = min(max(minimum, MAX_SIMULATED), len(costs))
        batch = [job(k) for k in range(len(done), min(max(need, len(done) + width), limit))]
        at_once = max(at_once, min(width, len(batch)))
        results = run.map(_run, batch, desc="simulating plans", label=lambda k, _: f"plan {len(done) + k + 1}")
        for check in results:  # in cost order, as the serial rule would stop
            if to_simulate(costs, [c.meets for c in done], minimum=minimum) <= len(done):
                break
            done.append(check)
    return done, at_once


def with_checks(plans: pd.DataFrame, checks: Sequence[Check]) -> pd.DataFrame:
    """``plans`` (ranked by cost) with the checks of the first ``len(checks)``: columns
    ``ttft_s_simulated`` and ``tpot_s_simulated`` (NaN where not simulated),
    ``meets_slo_simulated`` (True / False, None where not simulated), ``simulation_error``
    (None, or why it could not run: then ``meets_slo_simulated`` is None too) and ``recommended``
    (True on the cheapest that passed)."""
    out = plans.copy()
    n = len(checks)
    out["ttft_s_simulated"] = [c.ttft_s for c in checks] + [math.nan] * (len(out) - n)
    out["tpot_s_simulated"] = [c.tpot_s for c in checks] + [math.nan] * (len(out) - n)
    verdicts = [None if c.error else c.meets for c in checks] + [None] * (len(out) - n)
    out["meets_slo_simulated"] = pd.Series(verdicts, dtype=object)
    out["simulation_error"] = pd.Series([c.error for c in checks] + [None] * (len(out) - n), dtype=object)
    first = next((k for k, c in enumerate(checks) if c.meets), None)
    out["recommended"] = [k == first for k in range(len(out))]
    return out


def check_notes(plans: pd.DataFrame, *, seconds: float, processes: int) -> list[str]:
    """What the check did, in words: how many plans it simulated, in how long, and by which rule;
    or that it gave up. Plans are named by their ``plan`` number (the tables' numbering)."""
    simulated = int((plans["meets_slo_simulated"].notna() | plans["simulation_error"].notna()).sum())
    how = f"{simulated} plan(s) simulated in {seconds:.1f} s ({processes} process{'es' if processes > 1 else ''})"
    failed = [
        f"plan {r.plan} could not be simulated: {r.simulation_error}" for r in plans.itertuples() if r.simulation_error
    ]
    chosen = plans[plans["recommended"]]
    if chosen.empty:
        return failed + [
            f"{how}: none meets the SLOs in simulation, so nothing is recommended (the check simulates "
            f"{MAX_SIMULATED} plans at most); the queueing model is optimistic here: loosen the SLOs or add GPUs"
        ]
    rec = chosen.iloc[0]
    limit = (1.0 + RECOMMEND_WITHIN) * float(rec["cost_per_hour"])
    unchecked = plans["meets_slo_simulated"].isna() & plans["simulation_error"].isna()
    left = plans[unchecked & (plans["cost_per_hour"] <= limit)]
    notes = [
        f"{how}: every plan from the cheapest to the first that meets the SLOs (plan {rec['plan']}, recommended), "
        f"then every plan up to {RECOMMEND_WITHIN:.0%} dearer (${limit:,.2f}/hour)"
    ]
    notes += failed
    if not left.empty:
        notes.append(
            f"the check stops at {MAX_SIMULATED} simulations: plans {', '.join(map(str, left['plan'].unique()))} "
            f"are within the {RECOMMEND_WITHIN:.0%} and not checked"
        )
    return notes
