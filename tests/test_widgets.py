"""The interactive estimator (gpucap.app.widgets) without a browser or a kernel: set widget values as a
person would (observers fire synchronously) and check what the app shows against the package
called directly with the same inputs; and its SVG figures (gpucap.app.figures, gpucap.app.svg)."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ipywidgets")

import gpucap  # noqa: E402
import gpucap.app.widgets as gw  # noqa: E402
from gpucap.app.controls import ALLOWED_ENV
from gpucap.app.widgets import EstimatorApp
from gpucap.physics.requests import Requests

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
SEED = dict(input_len=3840, output_len=256, ttft_slo_s=2.0, tpot_slo_s=0.1)  # the app's defaults
SVG_NS = "{http://www.w3.org/2000/svg}"


def shown_concurrency(app: EstimatorApp) -> int:
    """The recommendation as a reader of the page sees it."""
    match = re.search(r"recommended concurrency: ([\d,]+)", app.recommendation.value)
    assert match, app.recommendation.value
    return int(match.group(1).replace(",", ""))


def count_calls(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Replace ``gpucap.app.widgets.<name>`` by a wrapper that counts its calls."""
    calls = [0]
    real: Callable[..., Any] = getattr(gw, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(gw, name, counted)
    return calls


def elements(svg: str, kind: str) -> list[ET.Element]:
    """The elements of an SVG document with class ``kind`` (parsing also checks it is well formed)."""
    return [e for e in ET.fromstring(svg).iter() if e.get("class") == kind]


def texts(svg: str) -> list[str]:
    return [e.text or "" for e in ET.fromstring(svg).iter(SVG_NS + "text")]


@pytest.fixture
def app() -> EstimatorApp:
    return EstimatorApp()


def test_defaults_show_what_estimate_computes(app: EstimatorApp) -> None:
    expected = gpucap.estimate(LLAMA_70B, "A100-SXM-80GB", 8, tp=8, **SEED)
    assert app.error is None and app.result is not None
    assert app.result.recommended_concurrency == expected.recommended_concurrency
    assert shown_concurrency(app) == expected.recommended_concurrency
    assert f"bottleneck: {gw.PLAIN_NAMES[expected.bottleneck]}" in app.status_text
    assert "gpucap-recommendation" in app.recommendation._dom_classes
    # hand-derived: 80 layers x 8 KV heads x 128 head dim x 2 (K and V) x 2 bytes (bf16)
    assert 80 * 8 * 128 * 2 * 2 == 327_680
    assert "327,680 bytes per token" in app.memory_text.value
    assert "40,960 per GPU" in app.status_text  # 8 KV heads over tp=8
    assert set(app.svgs) == {"memory", "constraints", "curves"}
    assert all(svg.startswith("<svg") and ET.fromstring(svg) is not None for svg in app.svgs.values())
    constraint_texts = texts(app.svgs["constraints"])
    assert f" recommended {expected.recommended_concurrency:,}" in constraint_texts
    assert f"{expected.limits['memory']:,.0f}" in constraint_texts  # the memory bar's label
    assert app.figures.layout.display != "none"


def test_changed_inputs_match_estimate_and_format_thousands(app: EstimatorApp) -> None:
    app.model.value = "Qwen/Qwen3-8B"
    app.tp.value = 4
    app.input_len.value = 1000
    app.kv_dtype.value = "fp8"
    app.engine.value = "sglang"
    assert app.gpu_memory_utilization.value == pytest.approx(0.88)  # SGLang's own default
    expected = gpucap.estimate(
        "Qwen/Qwen3-8B",
        "A100-SXM-80GB",
        8,
        tp=4,
        kv_dtype="fp8",
        engine="sglang",
        input_len=1000,
        output_len=256,
        ttft_slo_s=2.0,
        tpot_slo_s=0.1,
    )
    assert app.result is not None and app.result.replicas == 2
    assert expected.recommended_concurrency >= 1000
    assert shown_concurrency(app) == expected.recommended_concurrency
    assert f"recommended concurrency: {expected.recommended_concurrency:,}" in app.status_text
    assert "," in f"{expected.recommended_concurrency:,}"


def test_model_that_does_not_fit_shows_the_message_instead_of_figures(app: EstimatorApp) -> None:
    app.model.value = "deepseek-ai/DeepSeek-V3"
    assert app.result is None
    assert app.status_text.startswith("does not fit:")
    assert "short by" in app.status_text and "try" in app.status_text
    assert "does not fit" in app.recommendation.value
    assert app.figures.layout.display == "none"
    app.model.value = LLAMA_70B
    assert app.result is not None and app.figures.layout.display != "none"


def test_bad_input_shows_the_error_text_not_a_traceback(app: EstimatorApp, tmp_path: Path) -> None:
    app.tp.value = 3
    assert app.result is None
    assert app.status_text.startswith("error: tp=3 does not divide")
    assert "Traceback" not in app.recommendation.value
    app.tp.value = 8
    app.model_path.value = str(tmp_path / "missing" / "config.json")
    assert app.status_text.startswith("error: model config") and "does not exist" in app.status_text
    assert app.model.disabled  # the path overrides the list
    app.model_path.value = ""
    app.calibration.value = str(tmp_path / "nope.json")
    assert "coefficients file" in app.status_text and "does not exist" in app.status_text
    app.calibration.value = ""
    assert app.result is not None and not app.model.disabled


def test_model_from_a_config_path(app: EstimatorApp) -> None:
    path = gpucap.model_cards()[LLAMA_70B]["path"]
    app.model_path.value = path
    expected = gpucap.estimate(path, "A100-SXM-80GB", 8, tp=8, **SEED)
    assert shown_concurrency(app) == expected.recommended_concurrency


def test_calibration_file_changes_the_result(app: EstimatorApp, tmp_path: Path) -> None:
    before = shown_concurrency(app)  # compute binds first here
    path = tmp_path / "coefficients.json"
    path.write_text(json.dumps({"coefficients": {"u_compute": {"value": 0.25}}}))
    app.calibration.value = str(path)
    expected = gpucap.estimate(LLAMA_70B, "A100-SXM-80GB", 8, tp=8, coefficients=path, **SEED)
    assert app.result is not None and app.result.coefficients.u_compute == 0.25
    assert shown_concurrency(app) == expected.recommended_concurrency < before
    assert "coefficients.json" in app.status_text


def test_slo_change_recomputes_the_estimate_only(monkeypatch: pytest.MonkeyPatch, app: EstimatorApp) -> None:
    memory = count_calls(monkeypatch, "hardware_memory")
    memory_fig = count_calls(monkeypatch, "memory_svg")
    curves = count_calls(monkeypatch, "loop_point")
    estimates = count_calls(monkeypatch, "estimate_for")
    app.ttft_slo_s.value = 0.5
    app.tpot_slo_ms.value = 60.0
    assert (memory[0], memory_fig[0], curves[0], estimates[0]) == (0, 0, 0, 2)
    expected = gpucap.estimate(LLAMA_70B, "A100-SXM-80GB", 8, tp=8, input_len=3840, output_len=256,
                               ttft_slo_s=0.5, tpot_slo_s=0.06)  # fmt: skip
    assert shown_concurrency(app) == expected.recommended_concurrency
    app.tpot_slo_ms.value = 100.0  # back to SLOs seen before: the estimates come from the cache
    app.ttft_slo_s.value = 2.0
    assert estimates[0] == 2
    assert app.result is not None and shown_concurrency(app) == app.result.recommended_concurrency
    app.gpu_memory_utilization.value = 0.8  # memory does change now
    assert memory[0] == 1 and memory_fig[0] == 1


def test_redrawn_figures_match_fresh_ones(monkeypatch: pytest.MonkeyPatch, app: EstimatorApp) -> None:
    """After changes that reuse cached stages, the figures must be what an app started with the
    final inputs draws: no stage may be reused for inputs it does not match."""
    curves = count_calls(monkeypatch, "loop_point")
    app.ttft_slo_s.value = 30.0  # above every TTFT on the curve: the axis must grow
    app.tpot_slo_ms.value = 10.0
    assert curves[0] == 0  # the SLOs move the marks, not the curves
    app.gpu_memory_utilization.value = 0.95  # memory holds more; vLLM still runs at most 256 at once
    fresh = EstimatorApp(ttft_slo_s=30.0, tpot_slo_ms=10.0, gpu_memory_utilization=0.95)
    assert app.svgs == fresh.svgs
    assert "SLO 30" in texts(app.svgs["curves"]) and "SLO 10" in texts(app.svgs["curves"])


def test_range_change_does_not_recompute_the_estimate(monkeypatch: pytest.MonkeyPatch, app: EstimatorApp) -> None:
    estimates = count_calls(monkeypatch, "estimate_for")
    curves = count_calls(monkeypatch, "loop_point")
    assert app.auto_range.value
    app.curve_max.value = 100.0
    assert estimates[0] == 0 and curves[0] == 1
    assert not app.auto_range.value  # moving the range by hand ends the automatic range
    assert app.curves is not None and app.curves.concurrency.max() <= 100.0


def test_communication_warning(app: EstimatorApp) -> None:
    app.model.value = "meta-llama/Llama-3.1-8B"
    app.gpu.value = "L40S-48GB"
    app.input_len.value = 1000
    assert app.result is not None and app.result.comm_share > 0.5
    assert "warning: communication is" in app.status_text
    assert "communication is" in app.warnings.value


def test_starting_values_and_unknown_names() -> None:
    app = EstimatorApp(model="Qwen/Qwen3-8B", gpu="H100-SXM-80GB", num_gpus=8, tp=1, input_len=1000)
    expected = gpucap.estimate("Qwen/Qwen3-8B", "H100-SXM-80GB", 8, tp=1, input_len=1000, output_len=256)
    assert shown_concurrency(app) == expected.recommended_concurrency
    with pytest.raises(TypeError, match="unknown inputs"):
        EstimatorApp(tensor_parallel=2)


# ---- the figures ------------------------------------------------------------------------------


def test_figures_take_package_results() -> None:
    from gpucap.app.figures import CurveMarks, constraints_svg, curves_svg, memory_svg
    from gpucap.physics.batching import closed_loop
    from gpucap.physics.memory import memory_breakdown

    est = gpucap.estimate("Qwen/Qwen3-8B", "H100-SXM-80GB", 1, input_len=1000, output_len=256)
    assert est.limits["interconnect"] is None  # one GPU: no link traffic, drawn as "not binding"
    assert "not binding" in texts(constraints_svg(est))
    assert len(elements(constraints_svg(est), "bar")) == 4  # memory, compute, HBM, max_num_seqs
    assert "a <b> & c" in texts(memory_svg(est.memory, title="a <b> & c"))  # escaped, read back

    hw = gpucap.hardware("deepseek-ai/DeepSeek-V3", "A100-SXM-80GB", tp=8)
    mem = memory_breakdown(hw.spec, hw.gpu, hw.layout, weight_dtype="bf16", kv_dtype="auto", engine=hw.engine)
    assert not mem.fits
    assert any(t.startswith("short by") for t in texts(memory_svg(mem, title="")))

    point = closed_loop(est.hw, est.coefficients, Requests(1000.0, 256.0), concurrency=[1.0, 10.0, 100.0])
    bare = curves_svg(point)  # no marks
    assert len(elements(bare, "curve")) == 3
    assert not any(elements(bare, k) for k in ("slo", "recommended", "memory-limit"))
    marked = curves_svg(point, CurveMarks(ttft_slo_s=50.0, recommended=10.0, memory_limit=1000.0))
    assert "SLO 50" in texts(marked)
    (slo,) = elements(marked, "slo")
    ttft_frame = elements(marked, "frame")[0]
    top, height = float(ttft_frame.get("y", "nan")), float(ttft_frame.get("height", "nan"))
    assert top <= float(slo.get("y1", "nan")) <= top + height  # the TTFT axis grows to show the SLO
    assert len(elements(marked, "recommended")) == 3  # one line per panel
    assert not elements(marked, "memory-limit")  # 1,000 lies beyond the curves: not drawn


def test_ticks_and_limits() -> None:
    from gpucap.app.svg import Scale, linear_ticks, log_label, log_ticks, padded_limits

    assert log_ticks(1.0, 1000.0) == [1.0, 10.0, 100.0, 1000.0]  # 3 decades: powers of ten
    assert log_ticks(1.0, 50.0) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0]  # under 2.2 decades: 1-2-5
    assert [log_label(v) for v in (0.05, 1.0, 1000.0)] == ["0.05", "1", "1,000"]
    ticks, label = linear_ticks(0.0, 84.8)  # 84.8 / 6 = 14.1 -> the first round step above: 20
    assert ticks == [0.0, 20.0, 40.0, 60.0, 80.0] and label(40.0) == "40"
    ticks, label = linear_ticks(0.0, 0.9)  # 0.15 -> 0.2
    assert ticks == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8]) and label(0.4) == "0.4"
    lo, hi = padded_limits([1.0, 100.0], log=True)  # two decades, 5% of them (0.1) at each end
    assert (math.log10(lo), math.log10(hi)) == pytest.approx((-0.1, 2.1))
    assert padded_limits([0.0, 10.0]) == pytest.approx((-0.5, 10.5))
    assert Scale(1.0, 100.0, 0.0, 200.0, log=True)(10.0) == pytest.approx(100.0)  # half-way in log
    assert Scale(0.0, 10.0, 300.0, 100.0)(2.5) == pytest.approx(250.0)  # a y axis runs upwards


def test_fixed_lengths_show_their_own_estimate_and_knee(app: EstimatorApp) -> None:
    """The same box as a fixed-length load test: the estimate of that load (its first wave, then
    the convoy: ``gpucap.physics.waves``), the knee of its own curve marked and explained. After
    the first wave each 3,840-token prompt waits for the one before it and takes 3,840 / (2,048 -
    C) steps of its own, so TTFT stays within twice a lone request's until C requests' prompt steps
    fill a whole life of 255 output steps, C x 3,840 / (2,048 - C) >= 255: C ~ 128. From there
    every step carries prompts, and they queue for the token budget."""
    app.lengths.value = "fixed"
    expected = gpucap.estimate(LLAMA_70B, "A100-SXM-80GB", 8, tp=8, lengths="fixed", **SEED)
    assert app.result is not None and app.result.recommended_concurrency == expected.recommended_concurrency
    assert app.knee is not None and app.knee.cause == "token budget" and 120 <= app.knee.concurrency <= 135
    assert f"{app.knee.concurrency:,.0f}" in app.knee_text.value
    root = ET.fromstring(app.svgs["curves"])
    assert any(el.get("class") == "knee" for el in root.iter())
    assert f" knee {app.knee.concurrency:,.0f}" in texts(app.svgs["curves"])


def test_served_page_reads_files_only_under_its_folders(
    app: EstimatorApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app.model_path.value = "/dev/zero"  # in a notebook any path, but never an endless read
    assert app.result is None and app.status_text.startswith("error:") and "/dev/zero" in app.status_text
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv(ALLOWED_ENV, str(allowed))
    app.model_path.value = "/etc/hostname"
    assert (
        f"reads model configs under {allowed} only" in app.status_text
        and "hostname" not in app.status_text.split("only")[1]
    )
    config = allowed / "config.json"
    config.write_text(Path(gpucap.model_cards()[LLAMA_70B]["path"]).read_text())
    app.model_path.value = str(config)
    assert app.result is not None
    app.model_path.value = ""
    app.calibration.value = "/etc/passwd"
    assert "reads coefficients files under" in app.status_text and "root:x:0:0" not in app.status_text


def upload(data: bytes, name: str = "config.json") -> tuple[dict[str, object], ...]:
    """What ipywidgets 8's FileUpload holds after a browser sends one file."""
    return ({"name": name, "type": "application/json", "size": len(data), "content": memoryview(data),
             "last_modified": dt.datetime(2026, 12, 1, tzinfo=dt.UTC)},)  # fmt: skip


def test_uploads_read_like_paths_and_server_files_are_not_echoed(
    app: EstimatorApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpucap.app.controls import UPLOAD_MAX_BYTES

    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv(ALLOWED_ENV, str(allowed))  # served: uploads still read
    llama = Path(gpucap.model_cards()[LLAMA_70B]["path"]).read_bytes()
    app.uploads["model_path"].value = upload(llama)
    assert app.result is not None and app.model_path.value.endswith("config.json")
    assert app.uploads["model_path"].value == ()  # ready for the next upload
    # a file over the cap is refused unread, and the page says so instead of an answer
    app.uploads["calibration"].value = upload(b" " * (UPLOAD_MAX_BYTES + 1), "huge.json")
    assert app.result is None and "'huge.json' is 1.0 MiB, over the 1 MiB" in app.status_text
    # the user's own coefficients file: errors say what is in it
    app.uploads["calibration"].value = upload(b'{"SECRET_KEY": 1}', "mine.json")
    assert "unknown coefficient 'SECRET_KEY'" in app.status_text
    # a file on the server that does not parse: named, its content not shown
    server_file = allowed / "coefficients.json"
    server_file.write_text('{"SECRET_KEY": "SECRET_VALUE"}')
    app.calibration.value = str(server_file)
    assert "does not read: a field is missing, unknown or out of range" in app.status_text
    assert "SECRET" not in app.status_text
    (allowed / "config.json").write_text('{"model_type": "llama", "SECRET_KEY": "SECRET_VALUE"')
    app.calibration.value = ""
    app.model_path.value = str(allowed / "config.json")
    assert "it is not valid JSON" in app.status_text and "SECRET" not in app.status_text


def test_a_pages_upload_folder_goes_with_its_kernel(tmp_path: Path) -> None:
    """Uploads live in a folder of their own under the temp dir; when the kernel that holds the
    page exits (culled, shut down, or a test run's end) the folder goes with it."""
    import subprocess
    import sys

    script = (
        "import datetime as dt\n"
        "from gpucap.app.widgets import EstimatorApp\n"
        "page = EstimatorApp()\n"
        "data = b'{\"u_compute\": 0.5}'\n"
        "page.uploads['calibration'].value = ({'name': 'mine.json', 'type': 'application/json', 'size': len(data),"
        " 'content': memoryview(data), 'last_modified': dt.datetime(2026, 12, 1, tzinfo=dt.UTC)},)\n"
        "print(page.calibration.value)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    folder = Path(run.stdout.strip().splitlines()[-1]).parents[1]
    assert folder.name.startswith("gpucap-uploads-") and not folder.exists()


def test_a_quantized_checkpoint_starts_in_its_own_format() -> None:
    """DeepSeek-V3 is published in fp8 (block-scaled e4m3) and gpt-oss in MXFP4: their configs'
    quantization_config says so, and the page starts there."""
    app = EstimatorApp(model="deepseek-ai/DeepSeek-V3", gpu="H200-SXM-141GB", num_gpus=8, tp=8)
    assert app.weight_dtype.value == "fp8" and "weights fp8 (the checkpoint's own format)" in app.status_text
    app.model.value = "openai/gpt-oss-120b"
    assert app.weight_dtype.value == "mxfp4"
    app.model.value = LLAMA_70B
    assert app.weight_dtype.value == "bf16"


def test_every_control_and_bar_says_what_it_is(app: EstimatorApp) -> None:
    from gpucap.app.controls import TIPS

    for name, w in app.inputs.items():
        assert (w.tooltip or "").strip(), f"{name} has no tooltip"
    assert set(TIPS) <= set(app.inputs)
    root = ET.fromstring(app.svgs["constraints"])
    # one tooltip per drawn bar (a resource that is not binding draws none), each naming its source
    bars = [el for el in root.iter(SVG_NS + "rect") if el.get("class") == "bar"]
    titles = [t.text or "" for el in bars for t in el.iter(SVG_NS + "title")]
    says = ("SLO", "KV", "max_num_seqs", "HTTP server", "TTFT doubles")  # what the limit or the knee is made of
    assert len(titles) == len(bars) >= 4 and all(any(w in t for w in says) for t in titles)
    # the recommendation's range is a pale band that says what it is
    (band,) = [el for el in root.iter(SVG_NS + "rect") if el.get("class") == "range"]
    assert "80% range" in (band.find(SVG_NS + "title").text or "")


def test_a_logged_kv_budget_replaces_the_worked_out_one(app: EstimatorApp) -> None:
    from gpucap.config import EngineConfig

    app.model.value = "Qwen/Qwen3-32B"
    app.gpu.value = "H100-SXM-80GB"
    app.num_gpus.value, app.tp.value = 1, 1
    # Qwen3-32B bf16, 61.0 GiB of weights on an H100's 0.92 x 79.19 = 72.9 GiB usable: 84%
    assert "tight: the weights take 84%" in app.status_text
    app.kv_cache_memory_gib.value = 8.52  # "Available KV cache memory" of a start-up (data/memory case 26)
    assert app.memory is not None and app.memory.kv_budget == pytest.approx(8.52 * 2**30)
    assert "KV budget as given" in app.status_text and "tight:" not in app.status_text
    expected = gpucap.estimate(
        "Qwen/Qwen3-32B", "H100-SXM-80GB", 1, input_len=3840, output_len=256,
        engine=EngineConfig(kv_cache_memory_bytes=8.52 * 2**30),
    )  # fmt: skip
    assert shown_concurrency(app) == expected.recommended_concurrency
    app.kv_cache_memory_gib.value = 0.0  # back to gpucap's own
    assert app.memory.kv_budget != pytest.approx(8.52 * 2**30)


def test_a_shared_prefix_on_the_page_is_what_estimate_computes(app: EstimatorApp) -> None:
    """A 1,000-token system prompt in the prefix cache: the page's answer is estimate's with
    ``prefix_tokens=1000``, above the answer without it (its prefill skipped, its KV held once);
    with fixed lengths the page says prefix caching is modelled for varied traffic."""
    before = app.result.recommended_concurrency
    app.prefix_tokens.value = 1000
    expected = gpucap.estimate(LLAMA_70B, "A100-SXM-80GB", 8, tp=8, prefix_tokens=1000, **SEED)
    assert shown_concurrency(app) == expected.recommended_concurrency > before
    app.lengths.value = "fixed"
    assert app.error is not None and "varied traffic" in app.status_text


def test_the_knee_has_its_bar_and_its_label_is_not_struck_through() -> None:
    """The default case's TTFT bends where prompts fill the 2,048-token budget, which is no limit
    of its own: the constraints figure shows it as an orange bar named after its cause, whose
    tooltip says why. With 30,000-token prompts the TTFT SLO's line runs along the curves' foot,
    where the knee's label sits: the label moves above the line."""
    app = EstimatorApp()
    assert app.knee is not None and app.knee.cause == "token budget"
    root = ET.fromstring(app.svgs["constraints"])
    assert "knee: token budget" in texts(app.svgs["constraints"])
    bars = [el for el in root.iter(SVG_NS + "rect") if el.get("class") == "bar"]
    tips = [t.text or "" for el in bars for t in el.iter(SVG_NS + "title")]
    assert any("2,048-token budget" in t for t in tips)
    long = EstimatorApp(input_len=30000)
    curves = ET.fromstring(long.svgs["curves"])
    slo_y = float(next(el for el in curves.iter(SVG_NS + "line") if el.get("class") == "slo").get("y1"))
    label_y = float(next(el for el in curves.iter(SVG_NS + "text") if el.get("class") == "knee-label").get("y"))
    assert label_y <= slo_y - 3 or label_y >= slo_y + 14  # the label's glyphs (to 11 px above its foot) miss it


def test_speculative_decoding_on_the_page_is_what_estimate_computes(app: EstimatorApp) -> None:
    """Three draft tokens of an EAGLE/MTP head keeping 3 tokens a step: the page's answer is
    estimate's with that ``Speculative``; an acceptance length beyond draft tokens + 1 is an error
    that says what to change."""
    from gpucap.config import Speculative

    app.acceptance_length.value = 3.0
    app.draft_tokens.value = 3
    expected = gpucap.estimate(LLAMA_70B, "A100-SXM-80GB", 8, tp=8, speculative=Speculative(3, 3.0), **SEED)
    assert app.error is None and shown_concurrency(app) == expected.recommended_concurrency
    assert any("3 draft tokens" in n for n in app.result.notes)
    app.draft_tokens.value = 1
    assert app.error is not None and "raise draft_tokens or lower acceptance_length" in app.status_text


def test_a_fields_control_is_made_from_what_the_field_declares() -> None:
    """``field_control``: the label, the bounds, the widget and the choices' labels all come from
    the field's ``option``; a number without bounds is refused by name."""
    import dataclasses

    import ipywidgets as widgets

    from gpucap.app.controls import field_control
    from gpucap.options import Control, option

    @dataclasses.dataclass
    class Knobs:
        slots: int = option(4, kind="positive_int", page=Control("batch slots", (1, 64)), help="h")
        share: float = option(0.9, kind="positive_float", page=Control("share", (0.5, 1.0), "slider"), help="h")
        tokens: float = option(0.0, kind="float", page=Control("tokens", (0, 100), "int"), help="h")
        rate: float = option(1.5, kind="float", page=Control("rate", (0.0, 10.0)), help="h")
        mode: str = option("a", choices=("a", "b"), page=Control("mode", choice_labels={"a": "A (first)"}), help="h")
        eager: bool = option(True, kind="no_switch", page=Control("graphs"), help="h")
        free: float = option(1.0, kind="float", help="h")

    slots = field_control(Knobs, "slots")
    assert isinstance(slots, widgets.BoundedIntText)
    assert (slots.description, slots.value, slots.min, slots.max) == ("batch slots", 4, 1, 64)
    share = field_control(Knobs, "share", 0.8)
    assert isinstance(share, widgets.FloatSlider) and (share.value, share.min, share.max) == (0.8, 0.5, 1.0)
    assert isinstance(field_control(Knobs, "tokens"), widgets.BoundedIntText)  # a float field offered whole
    rate = field_control(Knobs, "rate")
    assert isinstance(rate, widgets.BoundedFloatText) and (rate.value, rate.max) == (1.5, 10.0)
    mode = field_control(Knobs, "mode", "b")
    assert isinstance(mode, widgets.Dropdown) and list(mode.options) == [("A (first)", "a"), ("b", "b")]
    assert mode.value == "b"
    assert list(field_control(Knobs, "mode", choices=["x", "y"], value="y").options) == [("x", "x"), ("y", "y")]
    eager = field_control(Knobs, "eager")
    assert isinstance(eager, widgets.Dropdown) and eager.value is True
    with pytest.raises(ValueError, match=r"Knobs\.free has no bounds"):
        field_control(Knobs, "free")
    with pytest.raises(ValueError, match="no field 'nothing'"):
        field_control(Knobs, "nothing")
    with pytest.raises(ValueError, match="widget must be one of"):
        Control("x", (0, 1), "knob")
    with pytest.raises(ValueError, match="lowest <= highest"):
        Control("x", (2, 1))


def test_the_page_offers_the_config_fields_as_they_declare_them() -> None:
    """Each control made from a field shows the field's label and, for a number, its bounds: a
    field's metadata, not the page, says what the control is."""
    from gpucap.app.controls import FIELD_CONTROLS, Controls
    from gpucap.options import options_of

    c = Controls()
    for name, cls in FIELD_CONTROLS.items():
        page = options_of(cls)[name]["page"]
        w = c.inputs[name]
        assert w.description.endswith(f">{page.label}</span>"), name  # its tooltip wraps it
        if page.bounds is not None:
            assert (w.min, w.max) == pytest.approx(page.bounds), name
    assert c.tp.value == 8 and c.pp.value == 1 and c.kv_dtype.value == "auto"  # page starts, field defaults
    assert dict(c.lengths.options)["varied (traffic)"] == "varied"
