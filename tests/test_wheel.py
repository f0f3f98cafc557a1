"""The package as a user installs it: a wheel built from this checkout, installed (not editable)
into a folder of its own and run from another directory, answers ``gpucap estimate`` and
``gpucap gpus`` with the catalog it carries (gpucap.data), not with the checkout's files."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_installed_wheel_answers_from_its_own_data(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("gpucap-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpucap/data/gpus.csv" in names and "gpucap/physics/step.py" in names
    folders = sorted(p.parent.name for p in (ROOT / "gpucap").glob("*/__init__.py"))
    missing = [f for f in folders if f"gpucap/{f}/__init__.py" not in names]
    assert folders and not missing, f"subpackages missing from the wheel: {missing}"
    assert any(n.startswith("gpucap/data/models/meta-llama/") and n.endswith("config.json") for n in names)

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)], check=True
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "GPUCAP_DATA"} | {"PYTHONPATH": str(site)}

    def gpucap(*args: str) -> str:
        code = "import sys; from gpucap.cli.main import main; sys.exit(main())"
        done = subprocess.run(
            [sys.executable, "-c", code, *args], cwd=elsewhere, env=env, capture_output=True, text=True, check=True
        )
        return done.stdout

    where = subprocess.run(
        [sys.executable, "-c", "import gpucap, gpucap.catalog.gpus as g; print(gpucap.__file__); print(g.DATA_DIR)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert all(Path(p).is_relative_to(site) for p in where), where  # the wheel's files, not the checkout's
    assert "H100-SXM-80GB" in gpucap("gpus")
    answer = gpucap("estimate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100-SXM-80GB",
                    "--input-len", "1000", "--output-len", "200")  # fmt: skip
    assert "Llama-3.1-8B" in answer and "recommended" in answer.lower()
