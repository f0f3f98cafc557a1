"""Packaging: pyproject.toml is the single source of dependencies; environment.yml names the same
packages; CI and the README run the Makefile targets."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


REQ = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)")


def _name(requirement: str) -> str:
    """Normalized distribution name of a requirement ('pandas>=3.1' -> 'pandas')."""
    m = REQ.fullmatch(requirement)
    assert m, requirement
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def _spec(requirement: str) -> str:
    """Version specifier of a requirement, blanks removed ('pandas >= 3.1' -> '>=3.1')."""
    m = REQ.fullmatch(requirement)
    assert m, requirement
    return re.sub(r"\s+", "", m.group(2))


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _conda_dependencies() -> tuple[list[str], list[str]]:
    """(conda packages, pip entries) from environment.yml, by line: the '- x' items under
    'dependencies:', and the items of its nested 'pip:' list."""
    conda: list[str] = []
    pip: list[str] = []
    section = None
    pip_indent = None
    for raw in (ROOT / "environment.yml").read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if indent == 0:
            section = text.rstrip(":") if text.endswith(":") else None
            continue
        if section != "dependencies" or not text.startswith("- "):
            continue
        item = text[2:].strip()
        if pip_indent is not None and indent > pip_indent:
            pip.append(item)
            continue
        pip_indent = None
        if item == "pip:":
            pip_indent = indent
            continue
        conda.append(item)
    return conda, pip


def test_environment_names_the_same_packages_as_pyproject() -> None:
    project = _pyproject()["project"]
    wanted = {_name(r): _spec(r) for r in project["dependencies"] + project["optional-dependencies"]["notebooks"]}
    conda, _ = _conda_dependencies()
    have = {_name(r): _spec(r) for r in conda if _name(r) not in ("python", "pip")}
    assert set(have) == set(wanted)
    # Same lower bounds too, so the two files cannot drift apart.
    assert have == wanted


def test_environment_python_matches_requires_python() -> None:
    conda, _ = _conda_dependencies()
    python = [r for r in conda if _name(r) == "python"]
    assert python == ["python" + _pyproject()["project"]["requires-python"]]


def test_environment_installs_the_package_with_notebooks_extra() -> None:
    _, pip = _conda_dependencies()
    assert any(re.fullmatch(r"-e\s+\.\[([\w,]*)\]", p) and "notebooks" in p for p in pip), pip


def test_test_extra_has_the_tools_the_makefile_runs() -> None:
    test_extra = {_name(r) for r in _pyproject()["project"]["optional-dependencies"]["test"]}
    makefile = (ROOT / "Makefile").read_text()
    for tool in ("pytest", "ruff", "mypy", "nbstripout"):
        assert tool in makefile
        assert tool in test_extra


def test_ci_runs_make_test() -> None:
    ci = ROOT / ".ci" / "run"
    commands = [
        line.strip() for line in ci.read_text().splitlines() if line.strip() and not line.strip().startswith("#")
    ]
    assert "make test" in commands


@pytest.mark.skipif(not README.exists(), reason="README.md not written yet")
def test_readme_shows_make_lab_and_make_test() -> None:
    text = README.read_text()
    assert "make lab" in text
    assert "make test" in text


def test_the_package_list_is_discovered_not_typed() -> None:
    """setup.py finds the subpackages (``tests/test_wheel.py`` checks the wheel holds each one):
    pyproject.toml must not type a list of them that could fall behind the folders."""
    assert "packages" not in _pyproject()["tool"]["setuptools"]
    assert "find_packages" in (ROOT / "setup.py").read_text()
