"""Serve notebook 02 as a page for colleagues who do not code (``make app``): Voila with idle
kernels culled, so that closed pages do not keep their kernels (~70 MB each) forever.

Voila starts one kernel per visit; Jupyter Server's culler (``MappingKernelManager``) shuts a
kernel down once it has had no connection and no activity for CULL_IDLE_S seconds, checking
every CULL_INTERVAL_S: a closed page's kernel is gone within about a minute.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02-interactive-estimator.ipynb"
CULL_IDLE_S = 30
CULL_INTERVAL_S = 10


def voila_command(voila: str | Path, notebook: str | Path = NOTEBOOK, *, port: int, ip: str = "127.0.0.1") -> list[str]:
    """The Voila command line of the page."""
    return [
        str(voila),
        str(notebook),
        "--no-browser",
        f"--Voila.ip={ip}",
        f"--port={port}",
        f"--MappingKernelManager.cull_idle_timeout={CULL_IDLE_S}",
        f"--MappingKernelManager.cull_interval={CULL_INTERVAL_S}",
        "--MappingKernelManager.cull_connected=False",
    ]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8866)
    p.add_argument("--ip", default="127.0.0.1")
    a = p.parse_args(argv)
    voila = Path(sys.executable).parent / "voila"
    cmd = voila_command(voila, port=a.port, ip=a.ip)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
