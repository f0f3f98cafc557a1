"""Serve the pages for colleagues who do not code: the estimator, notebook 02 (``make app``), or
the capacity planner, notebook 05 (``make app-planner``; the planner searches only when Run is
pressed, so the page loads in seconds). Voila with idle kernels culled, so that closed pages do
not keep their kernels (~70 MB each) forever, and at most ``MAX_KERNELS`` at once
(``gpucap.app.kernels``: a visit beyond is told the page is full).

Voila starts one kernel per visit; Jupyter Server's culler (``MappingKernelManager``) shuts a
kernel down once it has had no connection and no activity for CULL_IDLE_S seconds, checking
every CULL_INTERVAL_S: a closed page's kernel is gone within about a minute. The page's path
boxes read files only under the folders in ``GPUCAP_APP_FILES`` (default: the shipped data and
the folder ``make app`` runs in); in a notebook they read anywhere.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpucap.app.controls import ALLOWED_ENV
from gpucap.app.kernels import MAX_KERNELS
from gpucap.catalog.gpus import DATA_DIR

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
PAGES = {
    "estimator": NOTEBOOKS_DIR / "02-interactive-estimator.ipynb",
    "planner": NOTEBOOKS_DIR / "05-planner-page.ipynb",
}
NOTEBOOK = PAGES["estimator"]
CULL_IDLE_S = 30
CULL_INTERVAL_S = 10


def voila_command(
    voila: str | Path,
    notebook: str | Path = NOTEBOOK,
    *,
    port: int,
    ip: str = "127.0.0.1",
    cull_idle_s: int = CULL_IDLE_S,
    cull_interval_s: int = CULL_INTERVAL_S,
    max_kernels: int = MAX_KERNELS,
) -> list[str]:
    """The Voila command line of the page (a test may cull sooner)."""
    return [
        str(voila),
        str(notebook),
        "--no-browser",
        f"--Voila.ip={ip}",
        f"--port={port}",
        f"--MappingKernelManager.cull_idle_timeout={cull_idle_s}",
        f"--MappingKernelManager.cull_interval={cull_interval_s}",
        "--MappingKernelManager.cull_connected=False",
        # at most max_kernels visits at once: every visit starts a ~100 MB kernel (gpucap.app.kernels)
        "--VoilaConfiguration.multi_kernel_manager_class=gpucap.app.kernels.CappedKernelManager",
        f"--CappedKernelManager.max_kernels={max_kernels}",
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8866)
    p.add_argument("--ip", default="127.0.0.1")
    p.add_argument("--page", default="estimator", choices=list(PAGES), help="which page to serve (default estimator)")
    a = p.parse_args(argv)
    voila = Path(sys.executable).parent / "voila"
    cmd = voila_command(voila, PAGES[a.page], port=a.port, ip=a.ip)
    # the page's path boxes read files under these folders only (gpucap.app.controls)
    os.environ.setdefault(ALLOWED_ENV, os.pathsep.join(map(str, default_readable())))
    os.execv(cmd[0], cmd)


def default_readable() -> list[Path]:
    """Folders the served page may read a config.json or coefficients file from, unless
    ``GPUCAP_APP_FILES`` says otherwise: the shipped data and the folder it was started from."""
    return [DATA_DIR, Path.cwd()]


if __name__ == "__main__":
    main()
