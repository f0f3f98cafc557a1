"""Speed of the interactive estimator (notebook 02): seconds from a value change to new outputs.

    python benchmarks/widget_speed.py [--repeats 5] [--kernel] [--profile INPUT]

For each input, an ``EstimatorApp`` at its starting values gets one new value, as a person would
set it; the time is from setting ``widget.value`` to the observer having updated the text and put
every figure the change affects into its output widget, which is what a reader of the page waits
for, less the browser's drawing. Each repeat builds a new app, so no change finds its result in
the app's caches; the table gives the median over the repeats. ``--kernel`` runs the same
measurement inside a Jupyter kernel, where each widget change is also sent out as a message over
the kernel's sockets; ``--profile`` prints a cProfile of one input's change.

``measure()`` is importable (``from benchmarks.widget_speed import measure``, repo root on
``sys.path``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.1

# (input, value set before the change and not timed, the new value): each a change from the
# app's starting state (Llama 3.3 70B on 8 x A100-SXM-80GB, TP 8, 3,840 in / 256 out tokens)
CHANGES: tuple[tuple[str, dict[str, Any], Any], ...] = (
    ("model", {}, "Qwen/Qwen3-8B"),
    ("model_path", {}, "Qwen/Qwen3-14B"),  # the catalog model's config.json, by path
    ("gpu", {}, "H100-SXM-80GB"),
    ("num_gpus", {}, 16),
    ("tp", {}, 4),
    ("pp", {"num_gpus": 16}, 2),
    ("ep", {"model": "Qwen/Qwen3-30B-A3B"}, 8),
    ("weight_dtype", {}, "fp8"),
    ("kv_dtype", {}, "fp8"),
    ("engine", {}, "sglang"),
    ("gpu_memory_utilization", {}, 0.85),
    ("cuda_graphs", {}, False),
    ("calibration", {}, "u_compute=0.3"),  # a coefficients file with this value
    ("input_len", {}, 8000),
    ("output_len", {}, 512),
    ("ttft_slo_s", {}, 1.0),
    ("tpot_slo_ms", {}, 50.0),
    ("curve_max", {}, 500.0),
    ("auto_range", {}, False),
)


def _value(name: str, value: Any, folder: Path) -> Any:
    """The widget value for a change: a catalog model's config path, or a coefficients file."""
    if name == "model_path":
        from gpucap.catalog.lookup import model_cards

        return model_cards()[value]["path"]
    if name == "calibration":
        key, number = value.split("=")
        path = folder / "coefficients.json"
        path.write_text(json.dumps({"coefficients": {key: {"value": float(number)}}}))
        return str(path)
    return value


@contextlib.contextmanager
def _quiet_display() -> Iterator[None]:
    """Outside a kernel ``display`` prints each image's text form; keep the table readable."""
    from IPython import get_ipython

    if get_ipython() is not None:
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _change_s(name: str, setup: dict[str, Any], value: Any, folder: Path, profiler: Any = None) -> float:
    """Seconds one change takes on a new app (its caches empty); ``profiler`` (a cProfile
    ``Profile``) records the change only."""
    from gpucap.app.widgets import EstimatorApp

    with _quiet_display():
        app = EstimatorApp()
        for key, before in setup.items():
            app.inputs[key].value = before
        widget = app.inputs[name]
        new = _value(name, value, folder)
        assert widget.value != new, f"{name} already is {new!r}"
        if profiler is not None:
            profiler.enable()
        t0 = time.perf_counter()
        widget.value = new
        elapsed = time.perf_counter() - t0
        if profiler is not None:
            profiler.disable()
    if app.error is not None:
        raise RuntimeError(f"setting {name} to {new!r} gave an error: {app.error}")
    return elapsed


def measure(repeats: int = 5) -> list[tuple[str, float]]:
    """Median seconds per update for each input in ``CHANGES``, over ``repeats`` new apps."""
    times: dict[str, list[float]] = {name: [] for name, _, _ in CHANGES}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for name, setup, value in CHANGES:
                times[name].append(_change_s(name, setup, value, Path(tmp)))
    return [(name, statistics.median(t)) for name, t in times.items()]


def _in_kernel(repeats: int) -> list[tuple[str, float]]:
    """``measure`` run inside a Jupyter kernel of this Python (widgets send their messages)."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from benchmarks.widget_speed import measure\n"
            f"print('RESULT', __import__('json').dumps(measure({repeats})))"
        )
        lines: list[str] = []
        kc.execute_interactive(
            code,
            timeout=1800,
            output_hook=lambda msg: (
                lines.append(msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None
            ),
        )
        text = "".join(lines)
        result = next((line for line in text.splitlines() if line.startswith("RESULT ")), None)
        if result is None:
            raise RuntimeError(f"the kernel printed no result:\n{text}")
        return [(name, float(s)) for name, s in json.loads(result[len("RESULT ") :])]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _profile(name: str) -> None:
    import cProfile
    import pstats

    setup, value = next((s, v) for n, s, v in CHANGES if n == name)
    with tempfile.TemporaryDirectory() as tmp:
        _change_s(name, setup, value, Path(tmp))  # imports and first-use set-up, not profiled
        profiler = cProfile.Profile()
        _change_s(name, setup, value, Path(tmp), profiler)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="new apps per input (the median is printed)")
    ap.add_argument("--kernel", action="store_true", help="measure inside a Jupyter kernel")
    ap.add_argument("--profile", metavar="INPUT", help="cProfile one change of INPUT instead")
    args = ap.parse_args()
    if args.profile:
        _profile(args.profile)
        return
    rows = _in_kernel(args.repeats) if args.kernel else measure(args.repeats)
    where = "in a Jupyter kernel" if args.kernel else "in this process"
    print(f"widget update, value change to new outputs ({where}, median of {args.repeats}):")
    print(f"{'input':<24} {'ms':>7}")
    for name, seconds in rows:
        flag = "" if seconds < TARGET_S else f"  (over {TARGET_S * 1e3:.0f} ms)"
        print(f"{name:<24} {seconds * 1e3:7.1f}{flag}")
    worst = max(rows, key=lambda row: row[1])
    print(f"slowest: {worst[0]} {worst[1] * 1e3:.1f} ms")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
