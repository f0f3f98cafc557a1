"""The capacity planner as widgets (notebook 04, the planner page of notebook 05): controls for the
inputs of ``gpucap.planning.search.plan``, a Run button with a progress bar (the search takes
seconds, the simulation check of the cheapest plans a few more), the recommended plan first and
highlighted, then the cheapest plans, and the rejected options counted by reason. Wiring only:
every number comes from ``gpucap.planning.search``.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import numpy as np
import pandas as pd

from gpucap.app.controls import model_options
from gpucap.catalog.gpus import load_gpus
from gpucap.catalog.lookup import model_cards
from gpucap.catalog.prices import Prices
from gpucap.planning.capacity import Headroom
from gpucap.planning.commands import plan_commands
from gpucap.planning.result import (
    NOT_CHECKED,
    PLAN_COLUMNS,
    TARGETS,
    Plan,
    number_plans,
    recommended_lines,
    rejected_counts,
)
from gpucap.planning.search import GPU_COUNTS, KV_DTYPES, WEIGHT_DTYPES, plan
from gpucap.queueing.lengths import Lengths
from gpucap.types import STATISTICS
from gpucap.units import MS

DEFAULT_MODEL = "meta-llama/Llama-3.3-70B-Instruct"
DEFAULT_GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "L40S-48GB")
TOP = 10  # plans shown
TARGET_LABELS = {"request_rate": "requests/s", "concurrency": "requests in flight", "output_tps": "output tokens/s"}
TABLE_COLUMNS = ["plan", *(c for c in PLAN_COLUMNS if c not in ("spare_replicas", "comm_share"))]
# Every run checks plans by simulation (as `gpucap plan` does: gpucap.planning.checks); its columns.
SIMULATED_COLUMNS = ["meets_slo_simulated", "ttft_s_simulated", "tpot_s_simulated"]
RECOMMENDED_CLASS = "gpucap-recommended"  # the recommended plan's row, first in the table
RECOMMENDED_STYLE = "background-color: #fff3bf; font-weight: bold"
INPUT_NAMES = (
    "model",
    "target_kind",
    "target_value",
    "input_len",
    "output_len",
    "ttft_slo_s",
    "tpot_slo_ms",
    "stat",
    "gpus",
    "failure_spares",
    "burst_margin_pct",
)
DESCRIPTION_WIDTH = "150px"
ROW_WIDTH = "370px"


class PlannerApp:
    """``display(PlannerApp().widget)`` (or ``PlannerApp()`` as a cell's last line).

    Inputs, one ipywidgets control each (attribute of the same name, CSS class ``gpucap-<name>``
    with dashes): ``model``, ``target_kind`` (request_rate, concurrency, output_tps),
    ``target_value``, ``input_len`` and ``output_len`` (text: ``2000`` or percentiles
    ``p50=800,p99=6000``), ``ttft_slo_s``, ``tpot_slo_ms``, ``stat``, ``gpus`` (several),
    ``failure_spares``, ``burst_margin_pct``. Keyword arguments set their starting values
    (``PlannerApp(target_value=5, gpus=["H100-SXM-80GB"])``).

    Search settings that are not controls: ``prices`` and ``usd_per_kwh`` (as ``plan`` takes
    them), ``gpu_counts``, ``weight_dtypes``, ``kv_dtypes``.

    ``run()`` (the Run button) searches, checks the cheapest plans by simulation and fills
    ``table`` (HTML: the recommended plan in words, then a table of ``TOP`` plans, the recommended
    one first in a row of CSS class ``RECOMMENDED_CLASS``, the others cheapest first, each with
    its ``plan`` number), ``commands`` (HTML: the commands that verify the recommended plan,
    ``commands_html``), ``rejected`` (HTML, rejected options counted by reason) and ``status``;
    ``result`` is the ``Plan``, ``error`` the message of an input the planner refused (then
    ``result`` is None).
    """

    def __init__(
        self,
        *,
        prices: Prices | str | Path | None = None,
        usd_per_kwh: float | None = None,
        gpu_counts: Iterable[int] = GPU_COUNTS,
        weight_dtypes: Iterable[str] = WEIGHT_DTYPES,
        kv_dtypes: Iterable[str] = KV_DTYPES,
        **values: Any,
    ) -> None:
        unknown = sorted(set(values) - set(INPUT_NAMES))
        if unknown:
            raise ValueError(f"unknown input(s) {', '.join(unknown)}; the inputs are {', '.join(INPUT_NAMES)}")
        self.search = {
            "prices": prices,
            "usd_per_kwh": usd_per_kwh,
            "gpu_counts": tuple(gpu_counts),
            "weight_dtypes": tuple(weight_dtypes),
            "kv_dtypes": tuple(kv_dtypes),
        }
        cards, gpus = list(model_cards()), list(load_gpus())
        style, row = {"description_width": DESCRIPTION_WIDTH}, widgets.Layout(width=ROW_WIDTH)
        kw: dict[str, Any] = {"style": style, "layout": row}

        self.model = widgets.Dropdown(
            options=model_options(cards), value=DEFAULT_MODEL if DEFAULT_MODEL in cards else cards[0], **kw
        )
        self.target_kind = widgets.Dropdown(
            options=[(TARGET_LABELS[t], t) for t in TARGETS], value="request_rate", description="target", **kw
        )
        self.target_value = widgets.BoundedFloatText(value=20.0, min=1e-6, max=1e12, description="target value", **kw)
        self.input_len = widgets.Text(value="2000", description="input tokens", continuous_update=False, **kw)
        self.output_len = widgets.Text(value="300", description="output tokens", continuous_update=False, **kw)
        self.ttft_slo_s = widgets.BoundedFloatText(value=2.0, min=1e-3, max=3600.0, description="TTFT SLO (s)", **kw)
        self.tpot_slo_ms = widgets.BoundedFloatText(value=100.0, min=0.1, max=1e5, description="TPOT SLO (ms)", **kw)
        self.stat = widgets.Dropdown(options=list(STATISTICS), value="p99", description="SLO statistic", **kw)
        self.gpus = widgets.SelectMultiple(
            options=gpus, value=[g for g in DEFAULT_GPUS if g in gpus], rows=len(gpus), description="GPUs", **kw
        )
        self.failure_spares = widgets.BoundedIntText(value=1, min=0, max=1000, description="failure spares (N+k)", **kw)
        self.burst_margin_pct = widgets.BoundedFloatText(
            value=20.0, min=0.0, max=1000.0, description="burst margin (%)", **kw
        )
        self.model.description = "model"
        self.inputs: dict[str, Any] = {name: getattr(self, name) for name in INPUT_NAMES}
        for name, w in self.inputs.items():
            w.add_class("gpucap-" + name.replace("_", "-"))
        for name, value in values.items():
            self.inputs[name].value = tuple(value) if name == "gpus" else value

        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play").add_class("gpucap-run")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="search").add_class("gpucap-progress")
        self.status = widgets.HTML().add_class("gpucap-status")
        self.table = widgets.HTML().add_class("gpucap-plans")
        self.rejected = widgets.HTML().add_class("gpucap-rejected")
        self.commands = widgets.HTML().add_class("gpucap-commands")
        self.run_button.on_click(self._on_run)

        def column(title: str, names: tuple[str, ...]) -> Any:
            return widgets.VBox([widgets.HTML(f"<b>{title}</b>"), *(self.inputs[n] for n in names)])

        controls = widgets.HBox(
            [
                column("Model and load", ("model", "target_kind", "target_value", "input_len", "output_len")),
                column(
                    "SLOs and headroom", ("ttft_slo_s", "tpot_slo_ms", "stat", "failure_spares", "burst_margin_pct")
                ),
                column("GPU types to search", ("gpus",)),
            ]
        )
        self.widget = widgets.VBox(
            [
                controls,
                widgets.HBox([self.run_button, self.progress]),
                self.status,
                self.table,
                self.commands,
                self.rejected,
            ]
        ).add_class("gpucap-planner")
        self.result: Plan | None = None
        self.error: str | None = None
        self.last_run_s = 0.0

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def plan_arguments(self) -> dict[str, Any]:
        """The controls read into keyword arguments of ``gpucap.planning.search.plan`` (raises ValueError for
        lengths it cannot read)."""
        target = {f"target_{self.target_kind.value}": float(self.target_value.value)}
        return {
            "model": self.model.value,
            **target,
            "input_len": Lengths.parse(self.input_len.value, "input_len"),
            "output_len": Lengths.parse(self.output_len.value, "output_len"),
            "ttft_slo_s": float(self.ttft_slo_s.value),
            "tpot_slo_s": float(self.tpot_slo_ms.value) * MS,
            "stat": self.stat.value,
            "gpus": list(self.gpus.value),
            "headroom": Headroom(
                failure_spares=int(self.failure_spares.value), burst_margin=float(self.burst_margin_pct.value) / 100
            ),
            "check": True,
            **self.search,
        }

    def _on_progress(self, done: int, total: int, started: float) -> None:
        self.progress.max = max(total, 1)
        self.progress.value = done
        self.status.value = f"searching: {done} of {total} options ({time.perf_counter() - started:.1f} s)"
        if done == total:
            self.status.value += "; checking the cheapest plans by simulation..."

    def _on_run(self, _button: Any = None) -> None:
        self.run()

    def run(self) -> Plan | None:
        """Search with the current inputs and show the result (or the reason it could not)."""
        started = time.perf_counter()
        self.progress.value, self.progress.bar_style = 0, ""
        self.status.value = "searching..."
        self.table.value = self.rejected.value = self.commands.value = ""
        self.run_button.disabled = True
        try:
            kwargs = self.plan_arguments()
            model = kwargs.pop("model")
            self.result, self.error = plan(model, progress=self._on_progress, **kwargs), None
        except ValueError as err:
            self.result, self.error = None, str(err)
        finally:
            self.run_button.disabled = False
            self.last_run_s = time.perf_counter() - started
        if self.result is None:
            self.progress.bar_style = "danger"
            self.status.value = f'<span style="color:#b00">{html.escape(str(self.error))}</span>'
            return None
        self.progress.max = self.progress.value = max(self.result.searched, 1)
        self.progress.bar_style = "success"
        self._show(self.result)
        return self.result

    def _show(self, result: Plan) -> None:
        slo = result.slo
        head = (
            f"<b>{html.escape(result.model)}</b>: {html.escape(result.target.describe())}, {slo.statistic} TTFT &le; "
            f"{slo.ttft_s:g} s, {slo.statistic} TPOT &le; {slo.tpot_s / MS:g} ms; {result.searched} options "
            f"searched in {result.search_s:.1f} s, {len(result.plans)} meet the SLOs by the queueing model"
            + (f"; {result.simulated} simulated in {result.check_s:.1f} s" if result.simulated else "")
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in result.notes)
        self.status.value = head + (f"<ul>{notes}</ul>" if notes else "")
        self.table.value = plans_html(result, TOP)
        self.commands.value = commands_html(result)
        counts = rejected_counts(result).drop(columns="short_GiB")
        self.rejected.value = (
            "" if counts.empty else f"<b>Rejected: {len(result.rejected)} options</b>" + _html_table(counts)
        )

    @property
    def table_frame(self) -> pd.DataFrame:
        """The plans the table shows, in its order and with the plans table's column names (empty
        before a run or after an error)."""
        if self.result is None:
            return pd.DataFrame(columns=TABLE_COLUMNS)
        shown = shown_plans(self.result, TOP)
        return shown[TABLE_COLUMNS + [c for c in SIMULATED_COLUMNS if c in shown]]


def plans_html(result: Plan, top: int = TOP) -> str:
    """The plans as the page shows them (also notebook 04): the recommendation in words
    (``recommended_lines``), then ``plan_table`` with the recommended plan's row first and
    highlighted (CSS class ``RECOMMENDED_CLASS``)."""
    table = plan_table(result, top)
    if table.empty:
        return "<p>no plan meets the SLOs</p>"
    first = result.recommended is not None
    said = "<br>".join(html.escape(line) for line in recommended_lines(result))
    return (
        f'<p class="gpucap-recommendation-text">{said}</p><b>'
        + ("The recommended plan, then the cheapest" if first else "The cheapest plans")
        + "</b> (plans are numbered cheapest first; KV formats that tie on fleet, cost and check share a row)"
        + _html_table(readable_checks(table), highlight=0 if first else None)
    )


def commands_html(result: Plan) -> str:
    """The commands that verify the recommended plan (the cheapest where nothing is recommended:
    ``gpucap.planning.commands.plan_commands``) as a collapsed block to copy: serve one replica,
    load-test it, calibrate, plan again. Empty where there is no plan."""
    if result.plans.empty:
        return ""
    try:
        commands = plan_commands(result)
    except ValueError as err:  # e.g. a split the engine's CLI cannot express
        return f"<p>No verify commands for this plan: {html.escape(str(err))}</p>"
    rec = result.recommended
    which = f"plan {rec['plan']}, recommended" if rec is not None else f"plan {result.plans.iloc[0]['plan']}, cheapest"
    return (
        f"<details><summary><b>Commands to verify it</b> ({html.escape(which)}): serve one replica, load-test it, "
        "fit the coefficients, plan again</summary>"
        f'<pre style="white-space:pre-wrap;font-size:11px">{html.escape(commands.text())}</pre></details>'
    )


def group_twins(plans: pd.DataFrame) -> pd.DataFrame:
    """Plans that share a plan number (``gpucap.planning.result.number_plans``: they differ only
    in the KV cache format and tie on fleet, cost and simulation verdict) as one row whose
    ``kv_dtype`` lists the formats ("fp8 / auto"), the first one's numbers kept."""
    if plans.empty:
        return plans
    if "plan" not in plans:
        plans = number_plans(plans)
    grouped = plans.groupby("plan", sort=False)
    out = grouped.head(1).copy()
    out["kv_dtype"] = grouped["kv_dtype"].transform(lambda k: " / ".join(dict.fromkeys(k))).loc[out.index]
    return out


def shown_plans(result: Plan, top: int = TOP) -> pd.DataFrame:
    """The ``top`` plans the page shows, twins grouped: the recommended plan first (where there is
    one), then the cheapest others in cost order."""
    plans = group_twins(result.plans)
    if "recommended" in plans and plans["recommended"].any():
        chosen = plans["recommended"].astype(bool)
        plans = pd.concat([plans[chosen], plans[~chosen]])
    return plans.head(top).reset_index(drop=True)


def plan_table(result: Plan, top: int = TOP) -> pd.DataFrame:
    """``shown_plans`` as people read them: plain headers with units (capacity in the target's own
    unit, latencies at the SLOs' statistic)."""
    plans = shown_plans(result, top)
    cols = TABLE_COLUMNS + [c for c in SIMULATED_COLUMNS if c in plans]
    capacity = "capacity_concurrency" if result.target.kind == "concurrency" else "capacity_requests_per_s"
    cols = [c for c in cols if not c.startswith("capacity_") or c == capacity]
    table = plans[cols].copy()
    for col in ("tpot_s", "tpot_s_simulated"):
        if col in table:
            table[col] = table[col] / MS
    stat = str(result.slo.statistic).upper() if result.slo.statistic != "mean" else "mean"
    names = {
        "plan": "plan", "gpu": "GPU", "gpus_per_replica": "GPUs per replica", "tp": "TP", "pp": "PP", "ep": "EP",
        "weight_dtype": "weights", "kv_dtype": "KV cache", "replicas": "replicas (with spares)",
        "total_gpus": "GPUs in all", "capacity_requests_per_s": "capacity per replica (requests/s)",
        "capacity_concurrency": "capacity per replica (requests in flight)",
        "utilization": "share of service rate", "ttft_s": f"{stat} TTFT (s)", "tpot_s": f"{stat} TPOT (ms)",
        "cost_per_hour": "$ per hour", "cost_per_million_output_tokens": "$ per million output tokens",
        "meets_slo_simulated": "meets SLOs in simulation", "ttft_s_simulated": f"simulated {stat} TTFT (s)",
        "tpot_s_simulated": f"simulated {stat} TPOT (ms)",
    }  # fmt: skip
    return table.rename(columns=names).reset_index(drop=True)


def readable_checks(table: pd.DataFrame) -> pd.DataFrame:
    """``plan_table`` for the page: the simulation's verdict as yes / no, and "not checked" in
    every simulated column of a plan the simulation did not run (never None or NaN; "n/a" for
    the TPOT of a simulated one-token answer)."""
    sim = [c for c in table.columns if "simulation" in c or c.startswith("simulated ")]
    if not sim:
        return table
    out = table.copy().astype({c: object for c in sim})
    verdict = next((c for c in sim if "simulation" in c), None)
    checked = [isinstance(v, bool | np.bool_) for v in out[verdict]] if verdict else []
    for c in sim:
        if c == verdict:
            out[c] = [("yes" if v else "no") if ok else NOT_CHECKED for v, ok in zip(out[c], checked, strict=True)]
        else:
            out[c] = [
                v if isinstance(v, float | int) and np.isfinite(v) else "n/a" if ok else NOT_CHECKED
                for v, ok in zip(out[c], checked or [False] * len(out), strict=True)
            ]
    return out


def _cell(value: Any) -> str:
    """A table cell's text: numbers to 4 significant digits, "n/a" for a missing one (a TPOT of
    one output token), never None or NaN."""
    if value is None or (isinstance(value, float | np.floating) and not np.isfinite(value)):
        return "n/a"
    if isinstance(value, float | np.floating):
        return f"{value:.4g}"
    return str(value)


def _html_table(frame: pd.DataFrame, highlight: int | None = None) -> str:
    """``frame`` as an HTML table; row ``highlight`` (the recommended plan) in class
    ``RECOMMENDED_CLASS`` and ``RECOMMENDED_STYLE``."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for k, row in enumerate(frame.itertuples(index=False)):
        mark = f' class="{RECOMMENDED_CLASS}" style="{RECOMMENDED_STYLE}"' if k == highlight else ""
        rows.append(f"<tr{mark}>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>")
    return f'<table class="dataframe"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
