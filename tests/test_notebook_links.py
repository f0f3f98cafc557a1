"""What the notebooks point at exists: every in-notebook link (``](#...)``) lands on a heading of
the same notebook, and every file they cite (a backticked path with a folder, or a ``.md`` name)
is in the repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ANCHOR = re.compile(r"\]\(#([^)\s]+)\)")
PATH = re.compile(r"`([\w.-]+/[\w./-]*|[\w.-]+\.md)`|\b([A-Z][A-Za-z_-]*\.md)\b")
PACKAGE_ROOTS = ("gpucap/", "data/", "benchmarks/", "notebooks/", "tests/")


def _markdown(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def _anchors(cells: list[str]) -> set[str]:
    """Jupyter's anchor of each heading: its text with spaces as hyphens."""
    return {m.group(1).strip().replace(" ", "-") for text in cells for m in re.finditer(r"^#+\s+(.+)$", text, re.M)}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_link_and_cited_file_exists(path: Path) -> None:
    cells = _markdown(path)
    heads = _anchors(cells)
    dead = [m.group(1) for text in cells for m in ANCHOR.finditer(text) if m.group(1) not in heads]
    assert not dead, f"{path.name}: links to no heading: {dead}"
    missing = []
    for text in cells:
        for m in PATH.finditer(text):
            cited = m.group(1) or m.group(2)
            if "/" in cited and not cited.startswith(PACKAGE_ROOTS):
                continue  # a path on the reader's machine (an example), not one of the repository's
            if not any((base / cited).exists() for base in (ROOT, ROOT / "notebooks")):
                missing.append(cited)
    assert not missing, f"{path.name} cites files the repository does not have: {missing}"


def test_a_dead_link_and_a_missing_file_are_found(tmp_path: Path) -> None:
    cells = ["# 1. One\n[go](#2.-Two) and `gpucap/nothing.py`, see DESIGN.md"]
    assert "2.-Two" not in _anchors(cells)
    cited = [m.group(1) or m.group(2) for m in PATH.finditer(cells[0])]
    assert cited == ["gpucap/nothing.py", "DESIGN.md"]
