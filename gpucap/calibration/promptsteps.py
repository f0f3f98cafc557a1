"""A fit whose compute rate the engine itself timed: u_compute from the server's step log, the
other coefficients from its load test's results.

A fit of ``u_compute`` to a closed loop's TTFT takes up whatever the model misses in how the
requests group into steps (waves that break up, prompts that arrive while a step runs): on vLLM's
CPU server it went to its upper bound, 1, while the server's own prompt steps ran at 0.86 of the
CPU's best matmul (benchmarks/README.md, "The compute rate from the server's own prompt steps").
The step log (``vllm serve --enable-logging-iteration-details``, ``gpucap.telemetry.steplog``)
times each step apart from the queue and the HTTP server, and a step that carries a prompt chunk
is mostly multiplies, so ``calibrate_with_prompt_steps``:

1. fits ``free`` to the runs (``gpucap.calibration.calibrate``), for the other coefficients;
2. takes the steps the log holds while the runs ran (``result_spans_s``) and solves for the
   u_compute that times their prompt steps right in the median, those coefficients held
   (``gpucap.calibration.stepfit.prompt_compute_share``);
3. fits ``free`` less u_compute to the runs again with it held there.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gpucap.calibration.calibrate import calibrate
from gpucap.calibration.fitresult import FitResult
from gpucap.calibration.stepfit import prompt_compute_share, step_compositions
from gpucap.calibration.validate import case_hardware
from gpucap.telemetry.steplog import StepLog, clock_s, clock_text

DEPLOYMENT_COLUMNS = ("model", "gpu", "num_gpus", "tp", "pp", "engine")


def result_spans_s(paths: Iterable[str | Path]) -> list[tuple[float, float]]:
    """(start, end) of each ``vllm bench serve`` result in ``paths`` on the step log's clock
    (``clock_s``): its ``date`` (``YYYYmmdd-HHMMSS`` in the machine's local time, stamped when the
    run has ended: ``vllm/benchmarks/serve.py``) less its ``duration``, with a second of slack
    either side (both clocks have whole seconds). A file without them is an error naming it."""
    spans = []
    for path in map(Path, paths):
        try:
            result = json.loads(path.read_text())
            end_at = dt.datetime.strptime(str(result["date"]), "%Y%m%d-%H%M%S")
            duration_s = float(result["duration"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"{path}: no usable date and duration ({type(e).__name__}: {e}); the step log is matched to "
                "vllm bench serve's result files, which have both"
            ) from None
        end = clock_s(end_at.strftime("%m-%d %H:%M:%S"))
        spans.append((end - duration_s - 1.0, end + 1.0))
    return spans


@dataclass(frozen=True)
class PromptStepFit:
    """The fit with u_compute held, u_compute and the prompt steps it came from, and the first
    fit (all of ``free`` to the runs) whose u_compute it replaced."""

    fit: FitResult
    u_compute: float
    prompt_steps: int
    first: FitResult

    def report(self) -> str:
        return (
            f"u_compute {self.u_compute:.3f} from the engine's own {self.prompt_steps} prompt steps during these runs "
            f"(fitted to the runs it was {self.first.coefficients.u_compute:.3f}); the rest fitted with it held\n"
            + self.fit.report()
        )


def calibrate_with_prompt_steps(
    cases: pd.DataFrame,
    log: StepLog,
    result_files: Iterable[str | Path],
    *,
    free: tuple[str, ...],
    fixed: dict[str, float] | None = None,
    **kwargs: Any,
) -> PromptStepFit:
    """The module docstring's three steps. ``cases``: the runs of ``result_files``, all on the one
    server whose step log ``log`` is; ``kwargs``: ``calibrate``'s other keywords, for both fits."""
    result_files = list(result_files)
    if not result_files:
        raise ValueError("no vllm bench serve result file to tell when the runs ran: the step log cannot be matched")
    if "u_compute" not in free:
        raise ValueError("u_compute is not free: there is nothing for the step log to time")
    present = [c for c in DEPLOYMENT_COLUMNS if c in cases.columns]
    deployments = cases[present].astype(str).drop_duplicates()
    if len(deployments) > 1:
        raise ValueError(
            f"a step log times one server; the runs hold {len(deployments)} deployments "
            f"({', '.join(present)}): fit each server's runs with its own log"
        )
    # the first fit is wanted for its coefficients only: no held-out refits, no second fit within ranges
    first = calibrate(cases, free=free, fixed=fixed, **{**kwargs, "intervals": "covariance", "compare_within": False})
    spans = result_spans_s(result_files)
    during = log.during(spans)
    if during.steps.empty:
        logged = log.steps["clock_s"]
        raise ValueError(
            f"{log.path}: no step logged while the runs ran ({clock_text(min(a for a, _ in spans))} to "
            f"{clock_text(max(b for _, b in spans))}; the log runs {clock_text(logged.min())} to "
            f"{clock_text(logged.max())}): is it the log of these runs' server, on the same clock?"
        )
    steps = step_compositions(during)
    hw, _, _ = case_hardware(cases.iloc[0])
    try:
        u = prompt_compute_share(hw, first.coefficients, steps)
    except ValueError as e:
        raise ValueError(f"{log.path}, while the runs ran: {e}") from None
    rest = tuple(n for n in free if n != "u_compute")
    fit = calibrate(cases, free=rest, fixed={**(fixed or {}), "u_compute": u}, **kwargs)
    prompt_steps = int((steps["prefill"] > 0).sum())
    fit.provenance["u_compute_from"] = {
        "step_log": str(log.path),
        "prompt_steps": prompt_steps,
        "u_compute_fitted_to_runs": first.coefficients.u_compute,
    }
    return PromptStepFit(fit=fit, u_compute=u, prompt_steps=prompt_steps, first=first)
