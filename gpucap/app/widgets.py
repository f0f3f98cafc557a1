"""The interactive estimator (notebook 02, ``make app``): ipywidgets controls for the inputs of
``gpucap.estimate`` (``gpucap.app.controls``) and live outputs: one GPU's memory, the concurrency
each resource allows, the recommendation, and TTFT / TPOT / output tokens/s against concurrency.

Wiring only, no formula: every number comes from ``gpucap.estimate``, ``gpucap.config.hardware``,
``gpucap.physics.memory.hardware_memory`` and ``gpucap.physics.batching.closed_loop``, every figure from
``gpucap.app.figures`` (SVG, drawn by the browser). Each stage is cached by the inputs it depends
on (``gpucap.app.cache``), so a change recomputes and redraws only what it must:

- hardware, memory breakdown and memory figure: model, GPU, TP/PP/EP, formats, engine, memory
  fraction, CUDA graphs;
- estimate and constraint figure: the above, the GPU count, lengths, SLOs and calibration;
- curves (one closed-loop solve over a concurrency array): the estimate's inputs less the SLOs,
  plus the displayed concurrency range; the curves figure: the curves and their marks (SLO lines,
  recommendation, what memory holds).

``benchmarks/widget_speed.py`` times an update per input.
"""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import ipywidgets as widgets
import numpy as np

from gpucap.app.cache import LRU, Inputs
from gpucap.app.controls import CURVE_MAX_CHOICES, Controls, choose, engine_default_utilization
from gpucap.app.figures import CurveMarks, constraints_svg, curves_svg, memory_svg
from gpucap.calibration.ranges import range_note
from gpucap.config import Hardware
from gpucap.errors import DoesNotFit
from gpucap.estimate import Estimate, estimate_for
from gpucap.physics.batching import LoadPoint
from gpucap.physics.coefficients import Coefficients
from gpucap.physics.concurrency import loop_point
from gpucap.physics.extras import Extras
from gpucap.physics.memory import MemoryBreakdown, batch_slots, hardware_memory
from gpucap.report.knee import Knee, ttft_knee
from gpucap.report.text import PLAIN_NAMES, memory_note
from gpucap.units import GiB

CURVE_POINTS = 120  # concurrencies the curves are solved at (one vectorized closed_loop call)
FIGURES = ("memory", "constraints", "curves")

T = TypeVar("T")


class EstimatorApp(Controls):
    """The estimator as widgets: ``display(EstimatorApp().widget)`` (or just ``EstimatorApp()`` as a
    cell's last line).

    Inputs (each an ipywidgets control with CSS class ``gpucap-<name>``, dashes for underscores):
    ``model``, ``model_path``, ``gpu``, ``num_gpus``, ``tp``, ``pp``, ``ep``, ``weight_dtype``,
    ``kv_dtype``, ``engine``, ``gpu_memory_utilization``, ``cuda_graphs``, ``input_len``,
    ``output_len``, ``lengths``, ``prefix_tokens``, ``draft_tokens``, ``acceptance_length``,
    ``ttft_slo_s``, ``tpot_slo_ms``,
    ``calibration``, ``curve_max``, ``auto_range``.
    Keyword arguments set their starting values (``EstimatorApp(gpu="H100-SXM-80GB", tp=4)``). The
    SLO and range sliders move between fixed stops (``TTFT_SLO_CHOICES_S``, ...); a starting value
    that is not a stop becomes one.

    Outputs: ``result`` (the last ``Estimate``, None after an error), ``error`` (the message shown
    instead of the figures, or None), ``recommendation`` (HTML, class ``gpucap-recommendation``,
    text ``recommended concurrency: 1,234 ...``), ``warnings`` (HTML, class ``gpucap-warnings``),
    ``memory_text`` (HTML, class ``gpucap-memory-text``), ``status_text`` (the plain text of all
    three), the figure outputs ``memory_out``, ``constraints_out``, ``curves_out`` (HTML widgets
    holding an SVG each; ``svgs`` maps each figure's name to it), ``curves`` (the last closed-loop
    ``LoadPoint``), ``last_update_s`` and ``timings`` (seconds per stage of the last update).
    """

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)
        full = widgets.Layout(width="100%")
        self.recommendation = widgets.HTML(layout=full).add_class("gpucap-recommendation")
        self.warnings = widgets.HTML(layout=full).add_class("gpucap-warnings")
        self.memory_text = widgets.HTML(layout=full).add_class("gpucap-memory-text")
        self.memory_out = widgets.HTML().add_class("gpucap-memory-figure")
        self.constraints_out = widgets.HTML().add_class("gpucap-constraints-figure")
        self.curves_out = widgets.HTML().add_class("gpucap-curves-figure")
        self.knee_text = widgets.HTML(layout=full).add_class("gpucap-knee")
        self.figures = widgets.VBox(
            [widgets.HBox([self.memory_out, self.constraints_out]), self.memory_text, self.curves_out, self.knee_text]
        )
        # answer first: the recommendation and its warnings above the controls, on a laptop's first screen
        self.widget = widgets.VBox([self.recommendation, self.warnings, self.controls_box(), self.figures]).add_class(
            "gpucap-estimator"
        )

        self.result: Estimate | None = None
        self.error: str | None = None
        self.curves: LoadPoint | None = None
        self.knee: Knee | None = None
        self.hardware: Hardware | None = None
        self.memory: MemoryBreakdown | None = None
        self.last_update_s = 0.0
        self.timings: dict[str, float] = {}
        self.shown: dict[str, Hashable] = {}  # figure -> key of what it shows now
        self._recommendation_text = ""
        self._warnings_text = ""
        self._memory_text = ""
        self._quiet = False
        self._hardware_cache: LRU[Hardware] = LRU()
        self._memory_cache: LRU[MemoryBreakdown] = LRU()
        self._coefficient_cache: LRU[Coefficients] = LRU()
        self._estimate_cache: LRU[Estimate] = LRU()
        self._curve_cache: LRU[LoadPoint] = LRU()

        for w in self.inputs.values():
            w.observe(self._on_change, names="value")
        self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def svgs(self) -> dict[str, str]:
        """The SVG each figure output shows now (figure name -> document)."""
        outs = (self.memory_out, self.constraints_out, self.curves_out)
        return {name: out.value for name, out in zip(FIGURES, outs, strict=True) if out.value}

    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """Set widget values without each one starting an update."""
        quiet, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = quiet

    def _on_change(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        owner = change["owner"]
        with self._quietly():
            if owner is self.engine:  # each engine's own default fraction (SGLang 0.88, ...)
                self.gpu_memory_utilization.value = engine_default_utilization(self.engine.value, self.gpu.value)
            elif owner is self.model or owner is self.model_path:  # the new checkpoint's own weight format
                self.weight_dtype.value = self.checkpoint_dtype() or self.weight_dtype.value
            elif owner is self.curve_max:
                self.auto_range.value = False
        self.refresh()

    # --- text ----------------------------------------------------------------------------------

    @property
    def recommendation_text(self) -> str:
        return self._recommendation_text

    @property
    def status_text(self) -> str:
        """Plain text of what the page says: the recommendation (or the error), the warnings and the
        memory facts."""
        return "\n".join(t for t in (self._recommendation_text, self._warnings_text, self._memory_text) if t)

    def _set_recommendation(self, lines: list[str], kind: str = "ok") -> None:
        self._recommendation_text = "\n".join(lines)
        color = {"ok": "#1a1a1a", "does_not_fit": "#b00020", "error": "#b00020"}[kind]
        first, *rest = [html.escape(x) for x in lines] or [""]
        size = "1.25em" if kind == "ok" else "1.1em"
        self.recommendation.value = (
            f'<div style="color:{color};line-height:1.5"><div style="font-size:{size};font-weight:bold">{first}</div>'
            + "".join(f"<div>{x}</div>" for x in rest)
            + "</div>"
        )

    def _set_warnings(self, notes: list[str]) -> None:
        self._warnings_text = "\n".join(f"warning: {n}" for n in notes)
        self.warnings.value = "".join(
            f'<div style="background:#fff3cd;color:#664d03;padding:4px 8px;margin:2px 0">&#9888; {html.escape(n)}</div>'
            for n in notes
        )

    def _set_memory_text(self, text: str) -> None:
        self._memory_text = text
        self.memory_text.value = f'<div style="font-size:0.9em;color:#333">{html.escape(text)}</div>' if text else ""

    def _show_text(self, est: Estimate, mem: MemoryBreakdown) -> None:
        hw = est.hw
        coef_source = f"from {Path(self.calibration.value.strip()).name}" if self.calibration.value.strip() else ""
        # completions per second in the steady state: output tokens/s over output tokens per request
        per_s = est.output_tokens_per_s / max(float(self.output_len.value), 1.0)
        rate = f" (about {per_s:,.3g} requests/s)" if est.recommended_concurrency else ""
        where = f"at {est.concurrency:,.0f} concurrent requests" if est.recommended_concurrency else "one request alone"
        r = est.ranges
        self._set_recommendation(
            [
                f"recommended concurrency: {est.recommended_concurrency:,}{range_note(r, 'recommended_concurrency', '{:,.0f}')}"
                f"{rate} · bottleneck: {PLAIN_NAMES.get(est.bottleneck, est.bottleneck)}",
                *([est.binds[0].upper() + est.binds[1:]] if est.binds else []),
                f"{where}: mean TTFT {est.ttft_s * 1e3:,.0f} ms{range_note(r, 'ttft_s', '{:,.0f}', 1e3)}, "
                f"mean TPOT {est.tpot_s * 1e3:,.1f} ms{range_note(r, 'tpot_s', '{:,.1f}', 1e3)}, "
                f"{est.output_tokens_per_s:,.0f} output tokens/s{range_note(r, 'output_tokens_per_s', '{:,.0f}')}, "
                f"communication {est.comm_share:.0%} of a step",
                f"{est.replicas} replica(s) of {hw.layout.gpus_per_replica} GPU(s); memory holds "
                f"{est.limits['memory'] or 0:,.0f} requests at input+output "
                f"({est.memory_limit_mean_context:,.0f} at input+output/2); all requests at once: "
                f"{est.saturation_output_tokens_per_s:,.0f} output tokens/s; coefficients "
                f"{coef_source or hw.engine.engine + ' defaults'}; weights {hw.weight_dtype}"
                + (" (the checkpoint's own format)" if hw.weight_dtype == hw.spec.checkpoint_dtype != "bf16" else "")
                + (
                    f"; ranges hold {next(iter(r.values())).level:.0%} of measured values around gpucap's "
                    f"predictions of {next(iter(r.values())).band.basis}"
                    if r
                    else ""
                ),
            ]
        )
        self._set_warnings(est.notes)
        self._set_memory_text(
            f"KV cache: {mem.kv_bytes_per_token:,.0f} bytes per token for the whole model, "
            f"{mem.kv_bytes_per_token_per_gpu:,.0f} per GPU; KV budget {mem.kv_budget / GiB:,.2f} GiB per GPU "
            f"= {mem.kv_tokens_per_gpu:,.0f} tokens; weights {mem.weights.total / GiB:,.2f} GiB per GPU"
            + (
                f"; {note}"
                if (note := memory_note(mem, "the server's 'Available KV cache memory', typed in 'KV budget',"))
                else ""
            )
        )

    # --- the update ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Recompute what the current inputs need and redraw what changed. Bad input and models
        that do not fit show their message instead of the figures, never a traceback."""
        start = time.perf_counter()
        self.timings = {}
        try:
            self._update()
        except DoesNotFit as exc:
            self._fail(f"does not fit: {exc}", "does_not_fit")
        except ValueError as exc:  # bad input: gpucap's messages say what is wrong and what to try
            self._fail(f"error: {exc}", "error")
        except Exception as exc:  # anything else (e.g. a config.json lacking a field): its text, no traceback
            self._fail(f"error: {type(exc).__name__}: {exc}", "error")
        self.last_update_s = time.perf_counter() - start

    def _timed(self, stage: str, make: Callable[[], T]) -> T:
        t0 = time.perf_counter()
        value = make()
        self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - t0
        return value

    def _fail(self, message: str, kind: str) -> None:
        self.result, self.hardware, self.memory, self.curves, self.error = None, None, None, None, message
        self._set_recommendation([message], kind)
        self._set_warnings([])
        self._set_memory_text("")
        self.figures.layout.display = "none"

    def _hardware(self, inp: Inputs) -> Hardware:
        return self._hardware_cache.get(inp.hardware_key, inp.deployment.resolve)

    def _estimate(self, inp: Inputs, hw: Hardware, coef: Coefficients | None) -> Estimate:
        # the model and GPU already looked up (hw) are handed over, not looked up again
        resolved = dataclasses.replace(inp.deployment, model=hw.spec, gpu=hw.gpu)
        return self._estimate_cache.get(
            inp.estimate_key(coef),
            lambda: estimate_for(resolved, inp.workload, inp.slo, coefficients=coef),
        )

    @staticmethod
    def _max_running(hw: Hardware, est: Estimate) -> float:
        """Requests one replica runs at once, as in the estimate: max_num_seqs, or what memory holds."""
        return batch_slots(hw, float(est.limits["memory"] or 0.0) / est.replicas)

    def _curves(self, inp: Inputs, hw: Hardware, est: Estimate, curve_max: float) -> LoadPoint:
        """One closed-loop solve over concurrencies 1 .. ``curve_max`` (all replicas): the steady
        state of varied traffic, or the waves of a fixed-length load test (``gpucap.physics.concurrency.loop_point``)."""
        grid = np.unique(np.round(np.geomspace(1.0, max(curve_max, 2.0), CURVE_POINTS)))
        return self._curve_cache.get(
            (*inp.load_key(est.coefficients), curve_max),
            lambda: loop_point(
                hw,
                est.coefficients,
                inp.workload,
                grid / est.replicas,
                max_running=self._max_running(hw, est),
                extras=Extras(speculative=inp.speculative),
            ),  # fmt: skip
        )

    def _update(self) -> None:
        self.model.disabled = bool(self.model_path.value.strip())  # a path overrides the list
        inp = self.read()
        hw = self._timed("hardware", lambda: self._hardware(inp))
        coef = (
            self._coefficient_cache.get(
                (inp.calibration, inp.calibration_stamp, inp.engine),
                lambda: Coefficients.from_file(inp.calibration, inp.engine),
            )
            if inp.calibration
            else None
        )
        est = self._timed("estimate", lambda: self._estimate(inp, hw, coef))
        mem = self._timed("memory", lambda: self._memory_cache.get(inp.hardware_key, lambda: hardware_memory(hw)))
        curve_max = inp.curve_max
        if self.auto_range.value:  # the first stop at or above twice what the engine runs at once
            target = 2.0 * self._max_running(hw, est) * est.replicas
            curve_max = next((c for c in CURVE_MAX_CHOICES if c >= target), CURVE_MAX_CHOICES[-1])
            with self._quietly():
                choose(self.curve_max, curve_max)
        curves = self._timed("curves", lambda: self._curves(inp, hw, est, curve_max))
        knee = ttft_knee(
            hw,
            est.coefficients,
            curves,
            input_len=float(inp.input_len),
            replicas=est.replicas,
            max_running=self._max_running(hw, est),
            lengths=inp.lengths,
        )

        self.result, self.hardware, self.memory, self.curves, self.error = est, hw, mem, curves, None
        self.knee = knee
        self.knee_text.value = (
            f'<div style="font-size:0.9em;color:#333">{html.escape(knee.text)}.</div>' if knee else ""
        )
        self._timed("text", lambda: self._show_text(est, mem))
        self.figures.layout.display = None
        name = f"{hw.spec.name} on {hw.gpu.key}"
        self._show("memory", self.memory_out, inp.hardware_key, lambda: memory_svg(mem, title=f"{name}: one GPU"))
        knee_key = (knee.concurrency, knee.cause) if knee else None
        self._show(
            "constraints", self.constraints_out, (*inp.estimate_key(coef), knee_key), lambda: constraints_svg(est, knee)
        )
        marks = CurveMarks(
            ttft_slo_s=inp.ttft_slo_s,
            tpot_slo_s=inp.tpot_slo_s,
            recommended=est.recommended_concurrency,
            memory_limit=float(est.limits["memory"] or 0.0),
            knee=knee.concurrency if knee else None,
        )
        title = (
            f"{name}: {est.replicas} replica(s) of {hw.layout.gpus_per_replica} GPU(s), "
            f"{inp.input_len:,} in / {inp.output_len:,} out tokens"
        )
        self._show(
            "curves",
            self.curves_out,
            (*inp.load_key(coef), curve_max, marks),
            lambda: curves_svg(curves, marks, replicas=est.replicas, title=title),
        )

    def _show(self, name: str, out: Any, key: Hashable, make_svg: Callable[[], str]) -> None:
        """Draw a figure into its output unless it already shows the figure for ``key``."""
        if self.shown.get(name) == key:
            return

        def draw() -> None:
            out.value = make_svg()

        self._timed("draw " + name, draw)
        self.shown[name] = key
