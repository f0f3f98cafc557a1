"""The interactive estimator's inputs (``gpucap.app.widgets``): one ipywidgets control per input of
``gpucap.estimate``, their starting values and stops, their layout in three columns, and their
values read into ``Inputs``."""

from __future__ import annotations

import dataclasses
import html
import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from gpucap.app.cache import Inputs, stamp
from gpucap.catalog.gpus import get_gpu, load_gpus
from gpucap.catalog.lookup import load_model, model_cards
from gpucap.config import VLLM_UTILIZATION, Deployment, EngineConfig, Workload
from gpucap.options import Control, options_of
from gpucap.physics.coefficients import Coefficients

ALLOWED_ENV = "GPUCAP_APP_FILES"  # folders the served page may read files from (os.pathsep-separated)
# An uploaded config.json or coefficients file larger than this is refused unread: both are a few KB.
UPLOAD_MAX_BYTES = 1 << 20
UPLOADS = {"model_path": ("config.json", "model config"), "calibration": ("coefficients.json", "coefficients file")}

DEFAULT_MODEL = "meta-llama/Llama-3.3-70B-Instruct"
DEFAULT_GPU = "A100-SXM-80GB"
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
COLUMN_WIDTH = "385px"
DESCRIPTION_WIDTH = "150px"
# The controls made from a config field (``field_control``), each with the class that declares it,
# and the page's starting values where they are not the field's default.
FIELD_CONTROLS = {
    **{name: Deployment for name in ("gpu", "num_gpus", "tp", "pp", "ep", "weight_dtype", "kv_dtype")},
    **{name: EngineConfig for name in ("engine", "gpu_memory_utilization", "cuda_graphs")},
    **{name: Workload for name in ("input_len", "output_len", "lengths", "prefix_tokens")},
}
STARTS = {
    "num_gpus": 8,
    "tp": 8,
    "weight_dtype": "bf16",
    "gpu_memory_utilization": VLLM_UTILIZATION,
    "input_len": 3840,
    "output_len": 256,
}
# What each control means and where its value goes: the tooltip over it; for a field of the config
# objects, the field's own help (``gpucap.options``), as the command line shows it.
FIELD_TIPS = {
    name: meta["help"] for cls in (Deployment, Workload, EngineConfig) for name, meta in options_of(cls).items()
}
TIPS = {
    "model": "a model from the catalog (data/models/: its config.json, as published)",
    "model_path": "a path to any Hugging Face config.json (or its folder); replaces the list",
    **{name: FIELD_TIPS[name] for name in FIELD_CONTROLS},
    "input_len": FIELD_TIPS["input_len"] + " (type, then Enter)",
    "output_len": FIELD_TIPS["output_len"] + " (type, then Enter)",
    "kv_cache_memory_gib": (
        "the server's KV budget per GPU, GiB: 'Available KV cache memory' in its start-up log "
        "(vLLM --kv-cache-memory); 0: gpucap works it out"
    ),
    "draft_tokens": (
        "speculative decoding: tokens an EAGLE/MTP head drafts per step (vLLM --speculative-config "
        "num_speculative_tokens); 0: off"
    ),
    "acceptance_length": (
        "speculative decoding: tokens kept per step, the bonus token included, between 1 and draft tokens + 1; "
        "measure it (vLLM logs its 'Mean acceptance length'): it depends on the model, the head and the text"
    ),
    "ttft_slo_s": "the mean time to first token the recommendation must meet",
    "tpot_slo_ms": "the mean time per output token (after the first) the recommendation must meet",
    "calibration": "a calibration JSON saved by notebook 03 or gpucap calibrate; empty: the engine's defaults",
    "curve_max": "how far the curves go (concurrent requests, all replicas)",
    "auto_range": "on: the curves go up to twice what the engine runs at once; moving the range by hand turns it off",
}
ON_OFF = [("on", True), ("off", False)]
WHOLE_KINDS = ("positive_int", "count", "int")  # a field of these kinds gets a box for whole numbers
COLUMNS = (  # (title, inputs) of the three columns of controls
    ("Model and hardware", ("model", "model_path", "gpu", "num_gpus", "tp", "pp", "ep")),
    (
        "Formats and engine",
        (
            "weight_dtype",
            "kv_dtype",
            "engine",
            "gpu_memory_utilization",
            "kv_cache_memory_gib",
            "cuda_graphs",
            "calibration",
        ),
    ),
    (
        "Workload and SLOs",
        (
            "input_len",
            "output_len",
            "lengths",
            "prefix_tokens",
            "draft_tokens",
            "acceptance_length",
            "ttft_slo_s",
            "tpot_slo_ms",
            "curve_max",
            "auto_range",
        ),
    ),
)
# every input, column by column: the order the page shows them in
INPUT_NAMES = tuple(name for _, names in COLUMNS for name in names)


def model_options(model_ids: Iterable[str]) -> list[tuple[str, str]]:
    """(label, model id) for a dropdown: the name without its organization where that is
    unambiguous, so that the box shows it whole."""
    ids = list(model_ids)
    names = [m.split("/")[-1] for m in ids]
    return [(n if names.count(n) == 1 else m, m) for n, m in zip(names, ids, strict=True)]


def labelled(values: tuple[float, ...]) -> list[tuple[str, float]]:
    """Slider stops with thousands separators: ``[("1,000", 1000.0), ...]``."""
    return [(f"{v:,g}", v) for v in values]


def choose(w: Any, value: float) -> None:
    """Set a selection slider to ``value``, adding it as a stop when it is not one."""
    value = float(value)
    stops = [v for _, v in w.options]
    if value not in stops:
        w.options = labelled(tuple(sorted([*stops, value])))
    w.value = value


def engine_default_utilization(engine: str, gpu: str) -> float:
    """The engine's own ``gpu_memory_utilization`` on ``gpu`` (vLLM 0.92, SGLang 0.88, ...)."""
    try:
        return float(EngineConfig(engine=engine).resolve(get_gpu(gpu)).gpu_memory_utilization or 0.9)
    except ValueError:
        return 0.9


def field_control(cls: type, name: str, value: Any = None, *, choices: Sequence[str] | None = None, **look: Any) -> Any:
    """The page's control for field ``name`` of config class ``cls``, made from what the field
    declares (``gpucap.options.option`` and its ``Control``): the control's label; on/off for a
    switch; a dropdown of the field's choices (``choices`` in their place, e.g. the GPU catalog),
    each shown by its ``choice_labels``; a number in a box within its ``bounds`` (whole numbers
    where the field's kind or the control's ``widget`` says so) or a slider (``widget="slider"``,
    steps of a hundredth). ``value`` starts it (None: the field's default); ``look``: ipywidgets'
    ``style`` and ``layout``."""
    meta = options_of(cls).get(name)
    if meta is None:
        raise ValueError(
            f"{cls.__name__} has no field {name!r} declared with option(); fields: {', '.join(options_of(cls))}"
        )
    page = meta["page"] or Control(name)
    if value is None:
        value = next(f.default for f in dataclasses.fields(cls) if f.name == name)
    common = dict(description=page.label, **look)
    if meta["kind"] in ("switch", "no_switch"):
        return widgets.Dropdown(options=ON_OFF, value=bool(value), **common)
    options = choices if choices is not None else meta["choices"]
    if options is not None:
        shown = page.choice_labels or {}
        return widgets.Dropdown(options=[(shown.get(o, o), o) for o in options], value=value, **common)
    if page.bounds is None:
        raise ValueError(
            f"{cls.__name__}.{name} has no bounds for a page's control: give option(page=Control(label, bounds))"
        )
    lo, hi = page.bounds
    widget = page.widget or ("int" if meta["kind"] in WHOLE_KINDS else "float")
    if widget == "slider":
        return widgets.FloatSlider(value=value, min=lo, max=hi, step=0.01, readout_format=".2f", **common)
    if widget == "int":
        return widgets.BoundedIntText(value=int(value), min=int(lo), max=int(hi), **common)
    return widgets.BoundedFloatText(value=float(value), min=lo, max=hi, **common)


class Controls:
    """The input widgets as attributes (``model``, ``gpu``, ``tp``, ...; see ``INPUT_NAMES``), each
    with CSS class ``gpucap-<name>`` (dashes for underscores), and ``inputs`` (name -> widget).
    Keyword arguments set starting values; a slider value that is not a stop becomes one."""

    # made from the config fields (FIELD_CONTROLS)
    gpu: Any
    num_gpus: Any
    tp: Any
    pp: Any
    ep: Any
    weight_dtype: Any
    kv_dtype: Any
    engine: Any
    gpu_memory_utilization: Any
    cuda_graphs: Any
    input_len: Any
    output_len: Any
    lengths: Any
    prefix_tokens: Any

    def __init__(self, **values: Any) -> None:
        cards = model_cards()
        gpus = load_gpus()
        wide = {"description_width": DESCRIPTION_WIDTH}
        row = widgets.Layout(width=ROW_WIDTH)

        def text(description: str, placeholder: str) -> Any:
            return widgets.Text(
                value="",
                placeholder=placeholder,
                description=description,
                continuous_update=False,
                style=wide,
                layout=row,
            )

        def integer(description: str, value: int, lo: int, hi: int) -> Any:
            return widgets.BoundedIntText(value=value, min=lo, max=hi, description=description, style=wide, layout=row)

        def stops(choices: tuple[float, ...], value: float, description: str) -> Any:
            return widgets.SelectionSlider(
                options=labelled(choices), value=value, description=description, style=wide, layout=row
            )

        self.model = widgets.Dropdown(
            options=model_options(cards),
            value=DEFAULT_MODEL if DEFAULT_MODEL in cards else next(iter(cards)),
            description="model",
            style=wide,
            layout=row,
        )
        self.model_path = text("or config.json", "path to any config.json (overrides the list)")
        starts = {**STARTS, "gpu": DEFAULT_GPU if DEFAULT_GPU in gpus else next(iter(gpus))}
        for name, cls in FIELD_CONTROLS.items():
            choices = list(gpus) if name == "gpu" else None
            setattr(self, name, field_control(cls, name, starts.get(name), choices=choices, style=wide, layout=row))
        self.kv_cache_memory_gib = widgets.BoundedFloatText(
            value=0.0, min=0.0, max=10_000.0, step=0.01, description="KV budget, GiB/GPU", style=wide, layout=row
        )
        self.draft_tokens = integer("draft tokens", 0, 0, 64)
        self.acceptance_length = widgets.BoundedFloatText(
            value=1.0, min=1.0, max=65.0, step=0.1, description="acceptance length", style=wide, layout=row
        )
        self.ttft_slo_s = stops(TTFT_SLO_CHOICES_S, 2.0, "mean TTFT SLO (s)")
        self.tpot_slo_ms = stops(TPOT_SLO_CHOICES_MS, 100.0, "mean TPOT SLO (ms)")
        self.calibration = text("coefficients file", "calibration JSON (empty: engine defaults)")
        self.curve_max = stops(CURVE_MAX_CHOICES, 1000.0, "curves up to")
        self.auto_range = widgets.Dropdown(
            options=ON_OFF, value=True, description="automatic range", style=wide, layout=row
        )
        self.inputs: dict[str, Any] = {name: getattr(self, name) for name in INPUT_NAMES}
        for name, w in self.inputs.items():
            w.add_class("gpucap-" + name.replace("_", "-"))
            with_tip(w, TIPS[name])
        # Upload buttons beside the two path boxes: the file is kept in a folder of this page's own
        # and its path put in the box, so an upload reads exactly like a path.
        self.uploads: dict[str, Any] = {}
        for name, (_, what) in UPLOADS.items():
            button = widgets.FileUpload(
                accept=".json",
                multiple=False,
                description=f"upload {UPLOADS[name][0]}",
                tooltip=f"send a {what} from this computer; its path goes in the box above",
                layout=widgets.Layout(width="220px", margin=f"0 0 4px {DESCRIPTION_WIDTH}"),
            )
            button.add_class(f"gpucap-{name.replace('_', '-')}-upload")
            button.observe(lambda change, name=name: self._take_upload(name, change["new"]), names="value")
            self.uploads[name] = button
        self._upload_dir: Path | None = None
        self._upload_count = itertools.count(1)
        self.upload_error: str | None = None

        unknown = set(values) - set(self.inputs)
        if unknown:
            raise TypeError(f"EstimatorApp got unknown inputs {sorted(unknown)}; known: {', '.join(self.inputs)}")
        if ("model" in values or "model_path" in values) and "weight_dtype" not in values:
            for name in ("model", "model_path"):
                if name in values:
                    self.inputs[name].value = values[name]
            values["weight_dtype"] = self.checkpoint_dtype() or "bf16"
        if "engine" in values and "gpu_memory_utilization" not in values:
            values["gpu_memory_utilization"] = engine_default_utilization(values["engine"], self.gpu.value)
        if "curve_max" in values and "auto_range" not in values:
            values["auto_range"] = False
        for name, value in values.items():
            if isinstance(self.inputs[name], widgets.SelectionSlider):
                choose(self.inputs[name], value)
            else:
                self.inputs[name].value = value

    def controls_box(self) -> Any:
        """The controls in three titled columns (an upload button under each path box)."""
        return widgets.HBox(
            [
                widgets.VBox(
                    [
                        widgets.HTML(f"<b>{title}</b>"),
                        *(w for name in names for w in (self.inputs[name], self.uploads.get(name)) if w is not None),
                    ],
                    layout=widgets.Layout(width=COLUMN_WIDTH),
                )
                for title, names in COLUMNS
            ]
        )

    def refresh(self) -> None:
        """Recompute after an input changed (the estimator's page does the work)."""

    def _take_upload(self, name: str, files: Any) -> None:
        """Keep an uploaded file in this page's upload folder and put its path in box ``name``;
        a file over UPLOAD_MAX_BYTES is refused unread, with a message in place of the results."""
        if not files:
            return
        file_name, what = UPLOADS[name]
        item = files[0]
        content = bytes(item["content"])
        self.uploads[name].value = ()  # the same file can be uploaded again
        if len(content) > UPLOAD_MAX_BYTES:
            self.upload_error = (
                f"the uploaded {what} {item['name']!r} is {len(content) / 2**20:.1f} MiB, over the "
                f"{UPLOAD_MAX_BYTES / 2**20:g} MiB this page takes (a {what} is a few KB); upload the {what} itself"
            )
            self.refresh()
            return
        if self._upload_dir is None:
            self._upload_dir = Path(tempfile.mkdtemp(prefix="gpucap-uploads-"))
            # removed with the page: when its controls go, or when the kernel exits (culled, shut
            # down, or the test run ends); weakref.finalize runs at interpreter exit too
            weakref.finalize(self, shutil.rmtree, self._upload_dir, True)
        folder = self._upload_dir / str(next(self._upload_count))
        folder.mkdir()
        path = folder / file_name
        path.write_bytes(content)
        self.upload_error = None
        self.inputs[name].value = str(path)  # the box's observer recomputes

    @staticmethod
    def _roots() -> list[Path]:
        """The folders a served page may read (``ALLOWED_ENV``); none: anywhere (a notebook)."""
        return [Path(r).resolve() for r in os.environ.get(ALLOWED_ENV, "").split(os.pathsep) if r]

    def _uploaded(self, path: Path) -> bool:
        return self._upload_dir is not None and path.resolve().is_relative_to(self._upload_dir.resolve())

    def _readable(self, text: str, what: str) -> Path:
        """The path in a box, checked: an upload of this page, or under the folders the page may
        read (``ALLOWED_ENV``, set by ``gpucap.app.serve``; anywhere in a notebook), and existing."""
        path = Path(text).expanduser()
        roots = self._roots()
        if roots and not self._uploaded(path) and not any(path.resolve().is_relative_to(r) for r in roots):
            raise ValueError(
                f"this page reads {what}s under {', '.join(map(str, roots))} only ({ALLOWED_ENV}); copy the file there"
            )
        if not path.exists():
            raise ValueError(f"{what} {text!r} does not exist")
        return path

    def checkpoint_dtype(self) -> str | None:
        """The weight format of the chosen model's checkpoint (its config's quantization_config);
        None when the config.json in the box does not read (the update then says why)."""
        try:
            path_text = self.model_path.value.strip()
            source = self._readable(path_text, "model config") if path_text else self.model.value
            return load_model(source).checkpoint_dtype
        except ValueError:
            return None

    def _parses(self, path: Path, what: str, parse: Any) -> None:
        """Parse the file once; on a served page a file read from the server's folders that does
        not parse is named without its content (keys, values): the message says what kind of
        problem it is and how to see the details. An upload (the user's own file) or a notebook
        gets the full message."""
        try:
            parse()
        except ValueError as exc:
            if not self._roots() or self._uploaded(path):
                raise
            kind = (
                "it is not valid JSON"
                if "not valid JSON" in str(exc)
                else "a field is missing, unknown or out of range"
            )
            option = "--model" if what == "model config" else "--coefficients"
            raise ValueError(
                f"{what} {path} does not read: {kind}; this page does not show a server file's content "
                f"(`gpucap estimate {option} {path}` in a terminal names the field, or upload the file)"
            ) from None

    def read(self) -> Inputs:
        """The current values, normalized (paths resolved and stamped, no slider float noise);
        raises ValueError for a model path that does not exist."""
        if self.upload_error:
            raise ValueError(self.upload_error)
        model, model_stamp = self.model.value, 0
        path_text = self.model_path.value.strip()
        if path_text:
            try:
                path = self._readable(path_text, "model config")
            except ValueError as exc:
                raise ValueError(f"{exc}; give a path to a config.json (or its folder), or clear the box") from None
            self._parses(path, "model config", lambda: load_model(path))
            model, model_stamp = str(path.resolve()), stamp(path)
        calibration, calibration_stamp = "", 0
        calibration_text = self.calibration.value.strip()
        if calibration_text:
            path = self._readable(calibration_text, "coefficients file")
            self._parses(path, "coefficients file", lambda: Coefficients.from_file(path, self.engine.value))
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
            gpu_memory_utilization=round(float(self.gpu_memory_utilization.value), 4),
            kv_cache_memory_gib=round(float(self.kv_cache_memory_gib.value), 4),
            cuda_graphs=bool(self.cuda_graphs.value),
            input_len=int(self.input_len.value),
            output_len=int(self.output_len.value),
            ttft_slo_s=float(self.ttft_slo_s.value),
            tpot_slo_s=float(self.tpot_slo_ms.value) / 1e3,
            calibration=calibration,
            calibration_stamp=calibration_stamp,
            curve_max=float(self.curve_max.value),
            lengths=str(self.lengths.value),
            prefix_tokens=int(self.prefix_tokens.value),
            draft_tokens=int(self.draft_tokens.value),
            acceptance_length=round(float(self.acceptance_length.value), 4),
        )


def with_tip(w: Any, tip: str) -> None:
    """Put ``tip`` over a control's label. ipywidgets 8 shows a ``tooltip`` over the label of
    numbers and sliders only (the dropdown and text views drop it when a description is set), so
    the description is a span carrying the tip as its ``title``, on every control alike."""
    w.tooltip = tip
    w.description_allow_html = True
    w.description = f'<span title="{html.escape(tip, quote=True)}">{html.escape(w.description)}</span>'
