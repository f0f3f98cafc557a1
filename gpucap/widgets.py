"""The interactive estimator (notebook 02, ``make app``): ipywidgets controls for the inputs of
``gpucap.estimate`` and live outputs: one GPU's memory, the concurrency each resource allows, the
recommendation, and TTFT / TPOT / output tokens/s against concurrency.

Wiring only, no formula: every number comes from ``gpucap.estimate``, ``gpucap.estimate.hardware``,
``gpucap.estimate.hardware_memory`` and ``gpucap.batching.closed_loop``, every figure from
``gpucap.plots``. Each stage is cached by the inputs it depends on, so a change recomputes and
redraws only what it must:

- hardware, memory breakdown and memory figure: model, GPU, TP/PP/EP, formats, engine, memory
  fraction, CUDA graphs;
- estimate and constraint figure: the above, the GPU count, lengths, SLOs and calibration;
- curves (one closed-loop solve over a concurrency array): the estimate's inputs less the SLOs,
  plus the displayed concurrency range. The curves figure is kept while the curves stay the same
  and only its marks (SLO lines, recommendation, what memory holds) move.

``gpucap.estimate`` derives its own memory breakdown (about 50 us) on every call, an SLO change
included; the app's memory stage is neither recomputed nor redrawn then.
"""

from __future__ import annotations

import hashlib
import html
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import ipywidgets as widgets
import numpy as np
from IPython.display import Image, display
from matplotlib.figure import Figure

from .appcache import LRU, Inputs, png, stamp
from .batching import LoadPoint, closed_loop
from .catalog import model_cards
from .engine import ENGINES, Coefficients, EngineConfig
from .estimate import DoesNotFit, Estimate, estimate, hardware, hardware_memory
from .gpus import get_gpu, load_gpus
from .memory import MemoryBreakdown
from .plots import constraints_figure, load_curves_figure, memory_figure, set_load_curves_marks
from .step import Hardware
from .units import KV_BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_PARAM, GiB

DEFAULT_MODEL = "meta-llama/Llama-3.3-70B-Instruct"
DEFAULT_GPU = "A100-SXM-80GB"
CURVE_POINTS = 120  # concurrencies the curves are solved at (one vectorized closed_loop call)
# Slider stops. Exact values (not a log slider, whose browser side rounds 2.0 to 10**0.3 and
# sends it back): what a person sets is what the estimator gets.
TTFT_SLO_CHOICES_S = tuple(
    float(v) for v in "0.05 0.1 0.15 0.2 0.25 0.3 0.4 0.5 0.6 0.8 1 1.5 2 2.5 3 4 5 6 8 10 15 20 30 60".split()
)
TPOT_SLO_CHOICES_MS = tuple(
    float(v) for v in "5 10 15 20 25 30 40 50 60 70 80 100 120 150 200 250 300 400 500 1000".split()
)
CURVE_MAX_CHOICES = tuple(float(m * 10**e) for e in range(0, 6) for m in (1, 2, 5) if 2 <= m * 10**e <= 100_000)
ROW_WIDTH = "370px"
DESCRIPTION_WIDTH = "150px"

T = TypeVar("T")


def _labelled(values: tuple[float, ...]) -> list[tuple[str, float]]:
    return [(f"{v:,g}", v) for v in values]


def _choose(w: Any, value: float) -> None:
    """Set a selection slider to ``value``, adding it as a stop when it is not one."""
    value = float(value)
    stops = [v for _, v in w.options]
    if value not in stops:
        w.options = _labelled(tuple(sorted([*stops, value])))
    w.value = value


def _box_layout(width: str) -> widgets.Layout:
    return widgets.Layout(width=width)


class EstimatorApp:
    """The estimator as widgets: ``display(EstimatorApp().widget)`` (or just ``EstimatorApp()`` as a
    cell's last line).

    Inputs (each an ipywidgets control with CSS class ``gpucap-<name>``, dashes for underscores):
    ``model``, ``model_path``, ``gpu``, ``num_gpus``, ``tp``, ``pp``, ``ep``, ``weight_dtype``,
    ``kv_dtype``, ``engine``, ``gpu_memory_utilization``, ``cuda_graphs``, ``input_len``,
    ``output_len``, ``ttft_slo_s``, ``tpot_slo_ms``, ``calibration``, ``curve_max``, ``auto_range``.
    Keyword arguments set their starting values (``EstimatorApp(gpu="H100-SXM-80GB", tp=4)``). The
    SLO and range sliders move between fixed stops (``TTFT_SLO_CHOICES_S``, ...); a starting value
    that is not a stop becomes one.

    Outputs: ``result`` (the last ``Estimate``, None after an error), ``error`` (the message shown
    instead of the figures, or None), ``recommendation`` (HTML, class ``gpucap-recommendation``,
    text ``recommended concurrency: 1,234 ...``), ``warnings`` (HTML, class ``gpucap-warnings``),
    ``memory_text`` (HTML, class ``gpucap-memory-text``), ``status_text`` (the plain text of all
    three), the figure outputs ``memory_out``, ``constraints_out``, ``curves_out``, ``curves``
    (the last closed-loop ``LoadPoint``), ``pngs`` (the image each figure output shows),
    ``last_update_s`` and ``timings`` (seconds per stage of the last update).
    """

    def __init__(self, **values: Any) -> None:
        cards = model_cards()
        gpus = load_gpus()
        wide = {"description_width": DESCRIPTION_WIDTH}
        row = _box_layout(ROW_WIDTH)

        def tag(w: Any, name: str) -> Any:
            w.add_class("gpucap-" + name.replace("_", "-"))
            return w

        self.model = tag(
            widgets.Dropdown(
                options=list(cards),
                value=DEFAULT_MODEL if DEFAULT_MODEL in cards else next(iter(cards)),
                description="model",
                style=wide,
                layout=row,
            ),
            "model",
        )
        self.model_path = tag(
            widgets.Text(
                value="",
                placeholder="path to any config.json (overrides the list)",
                description="or config.json",
                continuous_update=False,
                style=wide,
                layout=row,
            ),
            "model_path",
        )
        self.gpu = tag(
            widgets.Dropdown(
                options=list(gpus),
                value=DEFAULT_GPU if DEFAULT_GPU in gpus else next(iter(gpus)),
                description="GPU",
                style=wide,
                layout=row,
            ),
            "gpu",
        )
        self.num_gpus = tag(self._int("number of GPUs", 8, 1, 4096), "num_gpus")
        self.tp = tag(self._int("tensor parallel (TP)", 8, 1, 512), "tp")
        self.pp = tag(self._int("pipeline parallel (PP)", 1, 1, 512), "pp")
        self.ep = tag(self._int("expert parallel (EP)", 1, 1, 512), "ep")
        self.weight_dtype = tag(
            widgets.Dropdown(
                options=list(WEIGHT_BYTES_PER_PARAM), value="bf16", description="weights", style=wide, layout=row
            ),
            "weight_dtype",
        )
        self.kv_dtype = tag(
            widgets.Dropdown(
                options=list(KV_BYTES_PER_ELEMENT), value="auto", description="KV cache", style=wide, layout=row
            ),
            "kv_dtype",
        )
        self.engine = tag(
            widgets.Dropdown(options=list(ENGINES), value="vllm", description="engine", style=wide, layout=row),
            "engine",
        )
        self.gpu_memory_utilization = tag(
            widgets.FloatSlider(
                value=0.9,
                min=0.5,
                max=1.0,
                step=0.01,
                description="gpu_memory_utilization",
                readout_format=".2f",
                style={"description_width": "initial"},
                layout=row,
                tooltip="share of GPU memory the engine takes (TensorRT-LLM: share of what is free after the weights)",
            ),
            "gpu_memory_utilization",
        )
        self.cuda_graphs = tag(
            widgets.Checkbox(value=True, description="CUDA graphs", indent=True, style=wide, layout=row),
            "cuda_graphs",
        )
        self.input_len = tag(self._int("input tokens", 3840, 1, 10_000_000), "input_len")
        self.output_len = tag(self._int("output tokens", 256, 1, 10_000_000), "output_len")
        self.ttft_slo_s = tag(
            widgets.SelectionSlider(
                options=_labelled(TTFT_SLO_CHOICES_S), value=2.0, description="TTFT SLO (s)", style=wide, layout=row
            ),
            "ttft_slo_s",
        )
        self.tpot_slo_ms = tag(
            widgets.SelectionSlider(
                options=_labelled(TPOT_SLO_CHOICES_MS),
                value=100.0,
                description="TPOT SLO (ms)",
                style=wide,
                layout=row,
            ),
            "tpot_slo_ms",
        )
        self.calibration = tag(
            widgets.Text(
                value="",
                placeholder="calibration JSON (empty: engine defaults)",
                description="coefficients file",
                continuous_update=False,
                style=wide,
                layout=row,
            ),
            "calibration",
        )
        self.curve_max = tag(
            widgets.SelectionSlider(
                options=_labelled(CURVE_MAX_CHOICES), value=1000.0, description="curves up to", style=wide, layout=row
            ),
            "curve_max",
        )
        self.auto_range = tag(
            widgets.Checkbox(
                value=True,
                description="automatic range",
                tooltip="up to twice what the engine runs at once",
                style=wide,
                layout=row,
            ),
            "auto_range",
        )
        self.inputs: dict[str, Any] = {
            name: getattr(self, name)
            for name in (
                "model",
                "model_path",
                "gpu",
                "num_gpus",
                "tp",
                "pp",
                "ep",
                "weight_dtype",
                "kv_dtype",
                "engine",
                "gpu_memory_utilization",
                "cuda_graphs",
                "input_len",
                "output_len",
                "ttft_slo_s",
                "tpot_slo_ms",
                "calibration",
                "curve_max",
                "auto_range",
            )
        }
        unknown = set(values) - set(self.inputs)
        if unknown:
            raise TypeError(f"EstimatorApp got unknown inputs {sorted(unknown)}; known: {', '.join(self.inputs)}")
        if "engine" in values and "gpu_memory_utilization" not in values:
            values["gpu_memory_utilization"] = self._engine_default_utilization(values["engine"])
        if "curve_max" in values and "auto_range" not in values:
            values["auto_range"] = False
        for name, value in values.items():
            if isinstance(self.inputs[name], widgets.SelectionSlider):
                _choose(self.inputs[name], value)
            else:
                self.inputs[name].value = value

        self.recommendation = widgets.HTML(layout=widgets.Layout(width="100%")).add_class("gpucap-recommendation")
        self.warnings = widgets.HTML(layout=widgets.Layout(width="100%")).add_class("gpucap-warnings")
        self.memory_text = widgets.HTML(layout=widgets.Layout(width="100%")).add_class("gpucap-memory-text")
        self.memory_out = widgets.Output().add_class("gpucap-memory-figure")
        self.constraints_out = widgets.Output().add_class("gpucap-constraints-figure")
        self.curves_out = widgets.Output().add_class("gpucap-curves-figure")
        self.figures = widgets.VBox(
            [widgets.HBox([self.memory_out, self.constraints_out]), self.memory_text, self.curves_out]
        )

        def column(title: str, *children: Any) -> widgets.VBox:
            return widgets.VBox([widgets.HTML(f"<b>{title}</b>"), *children], layout=_box_layout("385px"))

        controls = widgets.HBox(
            [
                column(
                    "Model and hardware",
                    self.model,
                    self.model_path,
                    self.gpu,
                    self.num_gpus,
                    self.tp,
                    self.pp,
                    self.ep,
                ),
                column(
                    "Formats and engine",
                    self.weight_dtype,
                    self.kv_dtype,
                    self.engine,
                    self.gpu_memory_utilization,
                    self.cuda_graphs,
                    self.calibration,
                ),
                column(
                    "Workload and SLOs",
                    self.input_len,
                    self.output_len,
                    self.ttft_slo_s,
                    self.tpot_slo_ms,
                    self.curve_max,
                    self.auto_range,
                ),
            ]
        )
        self.widget = widgets.VBox([controls, self.recommendation, self.warnings, self.figures]).add_class(
            "gpucap-estimator"
        )

        self.result: Estimate | None = None
        self.error: str | None = None
        self.curves: LoadPoint | None = None
        self.hardware: Hardware | None = None
        self.memory: MemoryBreakdown | None = None
        self.last_update_s = 0.0
        self.timings: dict[str, float] = {}
        self.shown: dict[str, Hashable] = {}  # figure -> key of what it shows now
        self.pngs: dict[str, bytes] = {}  # figure -> the PNG it shows now
        self._recommendation_text = ""
        self._warnings_text = ""
        self._memory_text = ""
        self._quiet = False
        self._hardware_cache: LRU[Hardware] = LRU()
        self._memory_cache: LRU[MemoryBreakdown] = LRU()
        self._coefficient_cache: LRU[Coefficients] = LRU()
        self._estimate_cache: LRU[Estimate] = LRU()
        self._curve_cache: LRU[LoadPoint] = LRU()
        self._png_cache: LRU[bytes] = LRU()
        self._curves_figure: tuple[Hashable, Figure] | None = None  # kept to move its SLO marks

        for w in self.inputs.values():
            w.observe(self._on_change, names="value")
        self.refresh()

    # --- widgets -------------------------------------------------------------------------------

    @staticmethod
    def _int(description: str, value: int, lo: int, hi: int) -> Any:
        return widgets.BoundedIntText(
            value=value,
            min=lo,
            max=hi,
            description=description,
            style={"description_width": DESCRIPTION_WIDTH},
            layout=_box_layout(ROW_WIDTH),
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """Set widget values without each one starting an update."""
        quiet, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = quiet

    def _engine_default_utilization(self, engine: str) -> float:
        try:
            gpu = get_gpu(self.gpu.value)
            return float(EngineConfig(engine=engine).resolve(gpu).gpu_memory_utilization or 0.9)
        except ValueError:
            return 0.9

    def _on_change(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        owner = change["owner"]
        with self._quietly():
            if owner is self.engine:  # each engine's own default fraction (SGLang 0.88, ...)
                self.gpu_memory_utilization.value = self._engine_default_utilization(self.engine.value)
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

    # --- the update ----------------------------------------------------------------------------

    def _read_inputs(self) -> Inputs:
        model, model_stamp = self.model.value, 0
        path_text = self.model_path.value.strip()
        if path_text:
            path = Path(path_text).expanduser()
            if not path.exists():
                raise ValueError(
                    f"model config {path_text!r} does not exist; give a path to a config.json "
                    "(or its folder), or clear the box to use the list"
                )
            model, model_stamp = str(path.resolve()), stamp(path)
        calibration, calibration_stamp = "", 0
        calibration_text = self.calibration.value.strip()
        if calibration_text:
            path = Path(calibration_text).expanduser()
            calibration, calibration_stamp = str(path.resolve()), stamp(path)
        return Inputs(
            model=model,
            model_stamp=model_stamp,
            gpu=self.gpu.value,
            num_gpus=int(self.num_gpus.value),
            tp=int(self.tp.value),
            pp=int(self.pp.value),
            ep=int(self.ep.value),
            weight_dtype=self.weight_dtype.value,
            kv_dtype=self.kv_dtype.value,
            engine=self.engine.value,
            gpu_memory_utilization=round(float(self.gpu_memory_utilization.value), 4),  # no slider float noise
            cuda_graphs=bool(self.cuda_graphs.value),
            input_len=int(self.input_len.value),
            output_len=int(self.output_len.value),
            ttft_slo_s=float(self.ttft_slo_s.value),
            tpot_slo_s=float(self.tpot_slo_ms.value) / 1e3,
            calibration=calibration,
            calibration_stamp=calibration_stamp,
            curve_max=float(self.curve_max.value),
        )

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

    def _update(self) -> None:
        self.model.disabled = bool(self.model_path.value.strip())  # a path overrides the list
        inp = self._read_inputs()
        hw = self._timed(
            "hardware",
            lambda: self._hardware_cache.get(
                inp.hardware_key,
                lambda: hardware(
                    inp.model,
                    inp.gpu,
                    tp=inp.tp,
                    pp=inp.pp,
                    ep=inp.ep,
                    weight_dtype=inp.weight_dtype,
                    kv_dtype=inp.kv_dtype,
                    engine=inp.engine_config,
                ),
            ),
        )
        coef = (
            self._coefficient_cache.get(
                (inp.calibration, inp.calibration_stamp), lambda: Coefficients.from_file(inp.calibration)
            )
            if inp.calibration
            else None
        )
        est = self._timed(
            "estimate",
            lambda: self._estimate_cache.get(
                inp.estimate_key(coef),
                lambda: estimate(
                    hw.spec,
                    hw.gpu,
                    inp.num_gpus,
                    input_len=inp.input_len,
                    output_len=inp.output_len,
                    tp=inp.tp,
                    pp=inp.pp,
                    ep=inp.ep,
                    weight_dtype=inp.weight_dtype,
                    kv_dtype=inp.kv_dtype,
                    ttft_slo_s=inp.ttft_slo_s,
                    tpot_slo_s=inp.tpot_slo_s,
                    engine=inp.engine_config,
                    coefficients=coef,
                ),
            ),
        )
        mem = self._timed(
            "memory",
            lambda: self._memory_cache.get(
                inp.hardware_key,
                lambda: hardware_memory(hw),
            ),
        )

        # the curves: one closed-loop solve over an array of concurrencies, with the running
        # requests capped as in the estimate (max_num_seqs, or what memory holds)
        replicas = est.replicas
        memory_total = float(est.limits["memory"] or 0.0)
        max_running = min(float(hw.engine.max_num_seqs or np.inf), memory_total / replicas)
        curve_max = inp.curve_max
        if self.auto_range.value:  # the first stop at or above twice what the engine runs at once
            target = 2.0 * max_running * replicas
            curve_max = next((c for c in CURVE_MAX_CHOICES if c >= target), CURVE_MAX_CHOICES[-1])
            with self._quietly():
                _choose(self.curve_max, curve_max)
        load_key = (*inp.load_key(coef), curve_max)
        grid = np.unique(np.round(np.geomspace(1.0, max(curve_max, 2.0), CURVE_POINTS)))
        curves = self._timed(
            "curves",
            lambda: self._curve_cache.get(
                load_key,
                lambda: closed_loop(
                    hw,
                    est.coefficients,
                    concurrency=grid / replicas,
                    input_len=float(inp.input_len),
                    output_len=float(inp.output_len),
                    max_running=max_running,
                ),
            ),
        )

        self.result, self.hardware, self.memory, self.curves, self.error = est, hw, mem, curves, None
        self._show_text(est, mem)
        self.figures.layout.display = None
        name = f"{hw.spec.name} on {hw.gpu.key}"
        self._show(
            "memory",
            self.memory_out,
            inp.hardware_key,
            lambda: png(memory_figure(mem, title=f"{name}: one GPU")),
        )
        self._show("constraints", self.constraints_out, inp.estimate_key(coef), lambda: png(constraints_figure(est)))
        marks = dict(
            ttft_slo_s=inp.ttft_slo_s,
            tpot_slo_s=inp.tpot_slo_s,
            recommended=est.recommended_concurrency,
            memory_limit=memory_total,
        )
        title = (
            f"{name}: {est.replicas} replica(s) of {hw.layout.gpus_per_replica} GPU(s), "
            f"{inp.input_len:,} in / {inp.output_len:,} out tokens"
        )
        # what the curves figure draws apart from its marks: the curves themselves, by value (a
        # change of, e.g., gpu_memory_utilization often leaves them as they were)
        drawn = hashlib.sha1(
            b"".join(
                np.ascontiguousarray(a, dtype=float).tobytes()
                for a in (curves.concurrency, curves.ttft_s, curves.tpot_s, curves.output_tokens_per_s)
            )
        ).hexdigest()
        base_key = (drawn, replicas, title)

        def curves_png() -> bytes:
            # the same curves: keep their figure and move its marks only
            if self._curves_figure is not None and self._curves_figure[0] == base_key:
                fig = set_load_curves_marks(self._curves_figure[1], **marks)
            else:
                fig = load_curves_figure(curves, replicas=replicas, title=title, **marks)
                self._curves_figure = (base_key, fig)
            return png(fig)

        self._show("curves", self.curves_out, (base_key, *marks.values()), curves_png)

    def _show_text(self, est: Estimate, mem: MemoryBreakdown) -> None:
        hw = est.hw
        coef_source = f"from {Path(self.calibration.value.strip()).name}" if self.calibration.value.strip() else ""
        self._set_recommendation(
            [
                f"recommended concurrency: {est.recommended_concurrency:,} · bottleneck: {est.bottleneck}",
                f"at {est.concurrency:,.0f} concurrent requests: TTFT {est.ttft_s * 1e3:,.0f} ms, "
                f"TPOT {est.tpot_s * 1e3:,.1f} ms, {est.output_tokens_per_s:,.0f} output tokens/s, "
                f"communication {est.comm_share:.0%} of a step",
                f"{est.replicas} replica(s) of {hw.layout.gpus_per_replica} GPU(s); memory holds "
                f"{est.limits['memory'] or 0:,.0f} requests at input+output "
                f"({est.memory_limit_mean_context:,.0f} at input+output/2); all requests at once: "
                f"{est.saturation_output_tokens_per_s:,.0f} output tokens/s; coefficients "
                f"{coef_source or hw.engine.engine + ' defaults'}",
            ]
        )
        self._set_warnings(est.notes)
        self._set_memory_text(
            f"KV cache: {mem.kv_bytes_per_token:,.0f} bytes per token for the whole model, "
            f"{mem.kv_bytes_per_token_per_gpu:,.0f} per GPU; KV budget {mem.kv_budget / GiB:,.2f} GiB per GPU "
            f"= {mem.kv_tokens_per_gpu:,.0f} tokens; weights {mem.weights.total / GiB:,.2f} GiB per GPU"
        )

    def _show(self, name: str, out: Any, key: Hashable, make_png: Callable[[], bytes]) -> None:
        """Draw a figure into its output unless it already shows the figure for ``key``.

        Displayed as a PNG image: ``display(fig)`` of a plain ``Figure`` shows only its text form
        unless ``%matplotlib inline`` ran in the kernel, and Voila pages do not run it."""
        if self.shown.get(name) == key:
            return
        png = self._timed("draw " + name, lambda: self._png_cache.get((name, key), make_png))
        with out:
            out.clear_output(wait=True)
            display(Image(data=png, format="png"))
        self.shown[name] = key
        self.pngs[name] = png
