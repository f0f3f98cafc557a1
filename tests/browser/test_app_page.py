"""The estimator page for colleagues who don't code, in a real browser.

Starts Voila on notebook 02 (127.0.0.1, a free port), opens it in headless Debian Chromium via
Playwright, changes the model and the context length like a person would, and checks that the
displayed recommendation becomes what the package computes for those inputs. A screenshot is
saved in the test's temporary folder. The server is stopped at the end, whatever happens.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from gpucap.app.serve import PAGES, voila_command

# the page's kernels are culled as `make app` culls them, sooner: 8 s idle, checked every 2 s
CULL_IDLE_S, CULL_INTERVAL_S = 8, 2

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = PAGES["estimator"]
CHROMIUM = os.environ.get("GPUCAP_CHROMIUM", "/usr/bin/chromium")
VOILA = Path(sys.executable).parent / "voila"
STARTUP_S = 90
LAPTOP = {"width": 1280, "height": 800}  # the first screen of a laptop browser
SERVERS: dict[str, int] = {}  # page address -> Voila's process id

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (make chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(notebook: Path, tmp_path_factory, **limits: int):
    """Voila serving ``notebook`` (culling as ``CULL_IDLE_S``, ``CULL_INTERVAL_S``; ``limits``
    passed on to ``voila_command``), its address yielded once it answers, stopped after."""
    port = _free_port()
    log = tmp_path_factory.mktemp("voila") / "voila.log"
    limits = {"cull_idle_s": CULL_IDLE_S, "cull_interval_s": CULL_INTERVAL_S, **limits}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            voila_command(VOILA, notebook, port=port, **limits), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
    url = f"http://127.0.0.1:{port}/"
    SERVERS[url] = proc.pid
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:  # a static file answers once the server is up; GET / would start a kernel
            try:
                urllib.request.urlopen(url + "voila/static/voila.js", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Voila did not start; its log:\n{log.read_text()}") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from _serve(NOTEBOOK, tmp_path_factory)


@pytest.fixture(scope="module")
def planner_server(tmp_path_factory):
    yield from _serve(PAGES["planner"], tmp_path_factory)


def _browser(pw):
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"])


@contextmanager
def _laptop_page():
    """A page of headless Chromium at a laptop's first screen that reaches only this machine."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = _browser(pw)
        try:
            page = browser.new_page(viewport=LAPTOP)
            _local_only(page)
            yield page
        finally:
            browser.close()


def _local_only(page) -> None:
    """The page asks a CDN for fonts: only this machine's server is reachable."""
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("http://127.0.0.1") else r.abort())


def _open(page, url: str, tries: int = 2) -> None:
    """Load the page until the app shows a recommendation. Voila streams the page while the
    notebook runs in a new kernel, so wait for the app's element rather than for the document;
    once in a while (a busy machine) the first kernel start stalls, so reload once."""
    from playwright.sync_api import TimeoutError as PageTimeout

    ready = page.locator(".gpucap-recommendation").filter(has_text="recommended concurrency")
    for attempt in range(tries):
        try:
            page.goto(url, wait_until="commit", timeout=60_000)
            ready.wait_for(timeout=90_000)
            return
        except PageTimeout:
            if attempt == tries - 1:
                raise


def _recommendation(page) -> int:
    text = page.locator(".gpucap-recommendation").inner_text()
    match = re.search(r"recommended concurrency:\s*([\d,]+)", text)
    assert match, f"no recommendation in {text!r}"
    return int(match.group(1).replace(",", ""))


def _wait_for_change(page, old: int, timeout_s: float = 30) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            new = _recommendation(page)
        except AssertionError:
            new = old
        if new != old:
            return new
        page.wait_for_timeout(250)
    return _recommendation(page)


def _wait_for_text(page, old: str, timeout_s: float = 30) -> str:
    """The recommendation's text once it differs from ``old``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = page.locator(".gpucap-recommendation").inner_text()
        if new != old:
            return new
        page.wait_for_timeout(250)
    raise AssertionError(f"the recommendation did not change in {timeout_s:g} s: {old!r}")


def _expected(app, *, model: str, input_len: int) -> int:
    """What the package computes for the page's inputs, called directly (not through the app)."""
    from gpucap import EngineConfig, estimate

    engine = EngineConfig(
        engine=app.engine.value,
        gpu_memory_utilization=app.gpu_memory_utilization.value,
        cuda_graphs=app.cuda_graphs.value,
    )
    est = estimate(
        model,
        app.gpu.value,
        app.num_gpus.value,
        input_len=input_len,
        output_len=app.output_len.value,
        tp=app.tp.value,
        pp=app.pp.value,
        ep=app.ep.value,
        weight_dtype=app.weight_dtype.value,
        kv_dtype=app.kv_dtype.value,
        ttft_slo_s=app.ttft_slo_s.value,
        tpot_slo_s=app.tpot_slo_ms.value / 1000,
        engine=engine,
    )
    return est.recommended_concurrency


def test_changing_model_and_context_updates_the_recommendation(server, tmp_path) -> None:
    from playwright.sync_api import sync_playwright

    from gpucap.app.widgets import EstimatorApp

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(viewport=LAPTOP)
            # the page asks a CDN for fonts: only this machine's server is reachable
            page.route(
                "**/*",
                lambda route: route.continue_() if route.request.url.startswith("http://127.0.0.1") else route.abort(),
            )
            _open(page, server)
            first = _recommendation(page)
            # answer first: the recommendation and its bottleneck on a laptop's first screen, unscrolled
            box = page.locator(".gpucap-recommendation").bounding_box()
            assert box is not None and box["y"] + box["height"] <= LAPTOP["height"], box
            page.screenshot(path=str(tmp_path / "estimator-first-screen.png"))
            # the headline names the SLO that binds and what drives it, by default and for a load test
            said = page.locator(".gpucap-recommendation").inner_text()
            assert re.search(
                r"The TPOT SLO binds at [\d,]+: [\d.,]+ of 100 ms.*compute drives the decode step", said
            ), said
            # a long fixed-length load test, after its first wave: each request waits for the prompt
            # step of the one before it and its life meets the others' (gpucap.physics.waves), so
            # the TPOT SLO binds, its average step mostly prompt chunks
            page.locator(".gpucap-lengths select").select_option(label="fixed (a load test)")
            varied = said
            said = _wait_for_text(page, varied)
            fixed = _recommendation(page)
            assert re.search(
                rf"The TPOT SLO binds at {fixed}: [\d.,]+ of 100 ms.*compute drives the decode step", said
            ), said
            page.locator(".gpucap-lengths select").select_option(label="varied (traffic)")
            assert _wait_for_text(page, said) == varied and _recommendation(page) == first
            # nothing meets the SLOs: the page names the SLO one request alone misses, not a resource
            length = page.locator(".gpucap-input-len input")
            length.fill("30000")
            length.press("Enter")
            assert _wait_for_change(page, first) == 0
            said = page.locator(".gpucap-recommendation").inner_text()
            assert "bottleneck: TTFT SLO (missed by one request alone)" in said and "one request alone:" in said
            length.fill(str(EstimatorApp().input_len.value))
            length.press("Enter")
            assert _wait_for_change(page, 0) == first

            app = EstimatorApp()  # the page's starting inputs, read from the same defaults
            label, model = next((k, m) for k, m in app.model.options if m != app.model.value and "Qwen3-8B" in m)
            page.locator(".gpucap-model select").select_option(label=label)
            after_model = _wait_for_change(page, first)
            assert after_model == _expected(app, model=model, input_len=app.input_len.value)

            length = page.locator(".gpucap-input-len input")
            length.fill("16000")
            length.press("Enter")
            after_length = _wait_for_change(page, after_model)
            assert after_length == _expected(app, model=model, input_len=16000)
            assert after_length < after_model  # a longer prompt leaves room for fewer requests
            page.wait_for_timeout(1500)  # the figures redraw just after the recommendation text
            page.screenshot(path=str(tmp_path / "estimator-page.png"), full_page=True)
        finally:
            browser.close()


def test_every_control_shows_what_it_is_on_hover(server, capsys) -> None:
    """Hover each control's label: the element under the pointer carries the control's tip (the
    browser shows an element's ``title`` as its tooltip), and no snake_case name is on the page's
    answer, chart titles or bars. The time from the request to the first answer is printed."""
    from gpucap.app.controls import INPUT_NAMES, TIPS

    with _laptop_page() as page:
        started = time.monotonic()
        _open(page, server)
        load_s = time.monotonic() - started
        with capsys.disabled():
            print(f"\nestimator page: first answer {load_s:.1f} s after the request (kernel start included)")
        missing = []
        for name in INPUT_NAMES:
            label = page.locator(f".gpucap-{name.replace('_', '-')} .widget-label span[title]").first
            label.scroll_into_view_if_needed()
            label.hover()
            box = label.bounding_box()
            assert box is not None, name
            shown = page.evaluate(
                "([x, y]) => { const e = document.elementFromPoint(x, y); const t = e && e.closest('[title]');"
                " return t ? t.getAttribute('title') : null; }",
                [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2],
            )
            if shown != TIPS[name]:
                missing.append(f"{name}: {shown!r}")
        assert not missing, missing
        # the answer, the charts' titles and the bars speak words, not code names
        rendered = [page.locator(".gpucap-recommendation").inner_text(), *page.locator("svg text").all_text_contents()]
        snake = sorted({m for text in rendered for m in re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", text)})
        assert len(rendered) > 20 and not snake, snake


def _kernels(server_pid: int) -> set[int]:
    """Process ids of the kernels the Voila process runs now (its live ipykernel children)."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == server_pid and b"ipykernel" in cmd and fields[0] not in ("Z", "X"):
            pids.add(int(stat.parent.name))
    return pids


def test_a_closed_page_leaves_no_kernel(server) -> None:
    from playwright.sync_api import sync_playwright

    voila = SERVERS[server]
    before = _kernels(voila)
    with sync_playwright() as pw:
        browser = _browser(pw)
        try:
            page = browser.new_page()
            _local_only(page)
            _open(page, server)
            visit = _kernels(voila) - before
            assert visit, "the page started no kernel"
        finally:
            browser.close()
    deadline = time.monotonic() + CULL_IDLE_S + 2 * CULL_INTERVAL_S + 15
    while _kernels(voila) & visit and time.monotonic() < deadline:
        time.sleep(2)
    assert not _kernels(voila) & visit, "the closed page's kernel was not shut down"


def test_the_planner_page_loads_without_searching(planner_server, tmp_path, capsys) -> None:
    """The planner page shows its controls and Run button and nothing else until Run is pressed
    (no search at load). The time from the request to the Run button is printed."""
    with _laptop_page() as page:
        started = time.monotonic()
        page.goto(planner_server, wait_until="commit", timeout=60_000)
        page.locator(".gpucap-run").wait_for(timeout=90_000)
        load_s = time.monotonic() - started
        assert page.locator(".gpucap-plans").inner_text().strip() == ""
        box = page.locator(".gpucap-run").bounding_box()
        assert box is not None and box["y"] + box["height"] <= LAPTOP["height"], box
        page.screenshot(path=str(tmp_path / "planner-page.png"))
    with capsys.disabled():
        print(f"\nplanner page: Run button shown {load_s:.1f} s after the request (kernel start included)")


def test_the_planner_page_shows_the_recommended_plan_first_and_highlighted(planner_server, tmp_path) -> None:
    """Run on the planner page with its starting inputs: the table's first row is the recommended
    plan (the one the sentence above the table names), highlighted, and no cell reads None or NaN."""
    from playwright.sync_api import sync_playwright

    from gpucap.app.planwidgets import RECOMMENDED_CLASS

    with sync_playwright() as pw:
        browser = _browser(pw)
        try:
            page = browser.new_page(viewport=LAPTOP)
            _local_only(page)
            page.goto(planner_server, wait_until="commit", timeout=60_000)
            page.locator(".gpucap-run").wait_for(timeout=90_000)
            page.locator(".gpucap-run").click()
            rows = page.locator(".gpucap-plans table tbody tr")
            rows.first.wait_for(timeout=120_000)
            first = rows.first
            assert RECOMMENDED_CLASS in (first.get_attribute("class") or "")
            assert page.locator(f".gpucap-plans tr.{RECOMMENDED_CLASS}").count() == 1
            shade = first.evaluate("row => getComputedStyle(row).backgroundColor")
            other = rows.nth(1).evaluate("row => getComputedStyle(row).backgroundColor")
            assert shade != other and shade not in ("rgba(0, 0, 0, 0)", "transparent"), (shade, other)
            said = page.locator(".gpucap-plans .gpucap-recommendation-text").inner_text()
            match = re.search(r"recommended: plan (\d+),", said)
            assert match, said
            cells = first.locator("td").all_inner_texts()
            assert cells[0].strip() == match.group(1)  # the plan column: the plan the sentence names
            assert "yes" in [c.strip() for c in cells]  # it meets the SLOs in simulation
            texts = page.locator(".gpucap-plans td, .gpucap-rejected td").all_inner_texts()
            assert texts and not [t for t in texts if re.search(r"\b(None|NaN|nan)\b", t)]
            # the commands that verify it, collapsed under the table: open them and read the server line
            commands = page.locator(".gpucap-commands details")
            assert f"plan {match.group(1)}, recommended" in commands.locator("summary").inner_text()
            commands.locator("summary").click()
            block = commands.locator("pre").inner_text()
            assert re.search(r"^vllm serve \S+ .*--tensor-parallel-size \d", block, re.M), block[:400]
            assert "vllm bench serve" in block and "gpucap calibrate" in block
            page.locator(".gpucap-plans").screenshot(path=str(tmp_path / "planner-recommended.png"))
        finally:
            browser.close()


def test_a_full_page_says_so(tmp_path_factory) -> None:
    """Every visit starts a kernel: with the cap at one, a second visit while the first kernel
    lives gets HTTP 503 and the line saying the page is full, not a new ~100 MB kernel."""
    import urllib.error

    served = _serve(PAGES["planner"], tmp_path_factory, cull_idle_s=60, cull_interval_s=10, max_kernels=1)
    url = next(served)
    try:
        with urllib.request.urlopen(url, timeout=120) as first:
            assert first.status == 200
            first.read()
        with pytest.raises(urllib.error.HTTPError) as second:
            urllib.request.urlopen(url, timeout=120)
        assert second.value.code == 503 and "This page is full (it serves 1 at once)" in str(second.value.reason)
    finally:
        served.close()  # stops the server
