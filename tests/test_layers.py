"""The package's layers: every import inside gpucap points down the stack below (or stays in its
own subpackage), so a file's folder says what it may use. An arrow pointing up or across fails
here with the file, the line and the two layers named.

    gpucap (the public surface), gpucap.__main__
    app, cli                      pages and the command line
    teaching                      the theory notebook's helpers, the seeds' formulas
    estimate                      the estimator (gpucap.estimate)
    report                        text and figures of results
    planning, calibration         fleets and plans; measured runs, fits, errors
    telemetry                     what a running engine reports: /metrics scrapes, its step log
    queueing                      latency under load: analytic queue, step-level simulation
    physics                       memory, step time, batching
    config                        Deployment, Workload, SLO, Layout, EngineConfig, Hardware
    catalog                       GPUs, models, prices (data read, no physics)
    base                          units, types, errors, text files, version, data, the parallel map, the lazy public names, the fields' options

Imports inside functions count the same as those at the top of a module; imports for type
hints only (under ``if TYPE_CHECKING:``) never run and are not arrows.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpucap"
BASE = {"units", "textfiles", "types", "errors", "version", "parallel", "lazy", "options"}
RANK = {
    "base": 0,
    "catalog": 1,
    "config": 2,
    "physics": 3,
    "queueing": 4,
    "telemetry": 5,
    "planning": 6,
    "calibration": 6,
    "report": 7,
    "estimate": 8,
    "teaching": 9,
    "app": 10,
    "cli": 10,
    "top": 11,
}


def layer(module: str) -> str:
    """The layer of a dotted module name inside gpucap ("gpucap.physics.step" -> "physics")."""
    parts = module.split(".")
    if parts == ["gpucap"] or parts[1:] == ["__main__"]:
        return "top"
    head = parts[1]
    if head in BASE or head == "data":
        return "base"
    if head not in RANK:
        raise KeyError(f"{module}: gpucap/{head} is in no layer; add it to RANK in {Path(__file__).name}")
    return head


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported gpucap module) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    hints_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in hints_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpucap":
            found += [(node.lineno, node.module)]
            if node.module == "gpucap":
                found += [(node.lineno, f"gpucap.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: use absolute imports (from gpucap.x import y)")
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "gpucap"]
    return found


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def wrong_arrows() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = module_name(path)
        mine = layer(here)
        for line, target in imports(path):
            theirs = layer(target)
            if theirs == mine or (mine == "top" and theirs != "top"):
                continue
            if RANK[theirs] >= RANK[mine]:
                way = "up" if RANK[theirs] > RANK[mine] else "across"
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {mine} imports {target} ({theirs}): {way}")
    return bad


def test_every_module_is_in_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        layer(module_name(path))


def test_imports_point_down() -> None:
    bad = wrong_arrows()
    assert not bad, "imports that point up or across:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("gpucap", "top"),
        ("gpucap.units", "base"),
        ("gpucap.catalog.gpus", "catalog"),
        ("gpucap.physics.step", "physics"),
        ("gpucap.estimate", "estimate"),
    ],
)
def test_layer_names(module: str, expected: str) -> None:
    assert layer(module) == expected


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """The check itself: a physics module that imports the planner is reported."""
    f = tmp_path / "x.py"
    f.write_text("def f():\n    from gpucap.planning.search import plan\n")
    ((line, target),) = imports(f)
    assert (line, layer(target)) == (2, "planning") and RANK["planning"] > RANK["physics"]
