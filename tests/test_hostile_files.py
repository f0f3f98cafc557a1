"""Files a user names that are not what they claim: a device that never ends (/dev/zero), a pipe
that never answers (a FIFO), a file of NUL bytes, a checkpoint beside the results. Each command
runs in its own process under a 3 GiB address-space limit and a 60 s timeout: it must stop with a
one-line message naming the file and exit 2, not grow, hang or print a traceback."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 3 << 30
MODEL = ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM-80GB", "--input-len", "1000", "--output-len", "200"]


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def gpucap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpucap", *args],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limit,
        cwd=ROOT,
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.csv"
    os.mkfifo(path)
    return path


def refused(run: subprocess.CompletedProcess[str], named: str, why: str) -> None:
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert named in lines[0] and why in lines[0], lines[0]


def test_startup_log_from_a_device_or_a_pipe(fifo: Path) -> None:
    refused(gpucap("estimate", *MODEL, "--startup-log", "/dev/zero"), "/dev/zero", "not a regular file")
    refused(gpucap("estimate", *MODEL, "--startup-log", str(fifo)), str(fifo), "not a regular file")


def test_manifest_from_a_device_or_a_pipe(tmp_path: Path, fifo: Path) -> None:
    results = ROOT / "data" / "loadtests" / "datacrunch-h200-sglang"
    for bad in ("/dev/zero", str(fifo)):
        out = tmp_path / "coef.json"
        refused(gpucap("calibrate", str(results), "--out", str(out), "--manifest", bad), bad, "not a regular file")
        assert not out.exists()  # nothing written


def test_cases_file_from_a_pipe_or_of_nul_bytes(tmp_path: Path, fifo: Path) -> None:
    refused(gpucap("validate", str(fifo)), str(fifo), "not a regular file")
    refused(gpucap("calibrate", str(fifo), "--out", str(tmp_path / "c.json")), str(fifo), "not a regular file")
    zeros = tmp_path / "zeros.csv"
    zeros.write_bytes(bytes(1 << 20))
    refused(gpucap("validate", str(zeros)), str(zeros), "cases file")
    refused(gpucap("calibrate", str(zeros), "--out", str(tmp_path / "c.json")), str(zeros), "not a readable CSV")


def test_calibration_traces_only_what_it_read(tmp_path: Path) -> None:
    """A checkpoint beside the results is neither read nor hashed (a sparse 4 GiB file: hashing
    it whole would pass the 3 GiB limit or take minutes); a pipe among them is skipped, not
    opened."""
    folder = tmp_path / "results"
    shutil.copytree(ROOT / "data" / "loadtests" / "datacrunch-h200-sglang", folder)
    with (folder / "model.safetensors").open("wb") as f:
        f.truncate(4 << 30)
    os.mkfifo(folder / "stream.json")
    out = tmp_path / "coef.json"
    run = gpucap("calibrate", str(folder), "--out", str(out), "--free", "u_compute,t_overhead_s")
    assert run.returncode == 0, run.stderr[-2000:]
    inputs = {Path(i["path"]).name for i in json.loads(out.read_text())["provenance"]["inputs"]}
    assert "manifest.json" in inputs and "model.safetensors" not in inputs and "stream.json" not in inputs


def test_ctrl_c_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C during a long command: exit 130 (the shell's code for SIGINT) with one line, not a
    traceback of the step it was in."""
    from gpucap.cli import main as cli

    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.COMMANDS, "plan", (cli.COMMANDS["plan"][0], interrupted))
    assert cli.main(["plan", "--model", "meta-llama/Llama-3.1-8B", "--target-rps", "1"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "gpucap plan: interrupted"
