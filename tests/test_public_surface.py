"""Each subpackage's public surface: the names its ``__init__.py`` declares resolve, are listed by
``dir`` and ``__all__``, and are what the notebooks import. A notebook that reaches into a
module (``gpucap.physics.step``) or takes a private name fails here, and so does a module of
gpucap that imports another module's private name."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucap.lazy import public_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpucap"
# gpucap.cli's surface is the command line itself
SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py") if p.parent.name != "cli")
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def code_of(notebook: Path) -> ast.Module:
    """A notebook's code cells as one module, IPython magics and shell lines left out."""
    cells = json.loads(notebook.read_text())["cells"]
    lines = [
        line
        for cell in cells
        if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
        if not line.lstrip().startswith(("%", "!"))
    ]
    return ast.parse("\n".join(lines))


def gpucap_imports(tree: ast.Module) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` for every import of gpucap; name None for ``import gpucap.x``."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpucap":
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "gpucap"]
    return found


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_every_declared_name_resolves_and_is_listed(sub: str) -> None:
    package = importlib.import_module(f"gpucap.{sub}")
    assert package.__all__, f"gpucap.{sub} declares no public names"
    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        assert not name.startswith("_")
        assert getattr(package, name) is not None
        assert name in dir(package)


def test_a_name_that_is_also_a_module_is_refused(tmp_path: Path) -> None:
    # gpucap.calibration.calibrate is a module; a package exporting its function under the same
    # name would hand out the module once anything imported it
    init = tmp_path / "__init__.py"
    (tmp_path / "calibrate.py").write_text("")
    init.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from gpucap.calibration.calibrate import calibrate as calibrate\n"
    )
    with pytest.raises(TypeError, match="'calibrate' is also the module"):
        public_names("somepackage", str(init))


def test_an_unknown_name_says_which_package() -> None:
    physics = importlib.import_module("gpucap.physics")
    with pytest.raises(AttributeError, match="'gpucap.physics' has no attribute 'no_such_name'"):
        physics.no_such_name  # noqa: B018


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.name for n in NOTEBOOKS])
def test_notebooks_import_only_public_names(notebook: Path) -> None:
    wrong = []
    for line, module, name in gpucap_imports(code_of(notebook)):
        where = f"{notebook.name}: code line {line}: "
        if name is None:
            if module != "gpucap":
                wrong.append(f"{where}import {module}: use 'from gpucap.<subpackage> import name'")
            continue
        if module.count(".") > 1:
            wrong.append(f"{where}from {module} import {name}: import it from {'.'.join(module.split('.')[:2])}")
            continue
        target = importlib.import_module(module)
        public = getattr(target, "__all__", None)
        if name.startswith("_") or (public is not None and name not in public) or not hasattr(target, name):
            wrong.append(f"{where}{name} is not public in {module}")
    assert not wrong, "\n".join(wrong)


def test_no_private_name_crosses_modules() -> None:
    crossings = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, module, name in gpucap_imports(ast.parse(path.read_text())):
            if name and name.startswith("_") and not name.startswith("__"):
                crossings.append(f"{path.relative_to(ROOT)}:{line}: {name} from {module}")
    assert not crossings, "\n".join(crossings)


def test_benchmark_scripts_import_names_that_exist() -> None:
    """The benchmark scripts run outside the test suite; a name they import that was renamed or
    removed fails here, not at the next benchmark run."""
    missing = []
    scripts = (p for p in (ROOT / "benchmarks").rglob("*.py") if not _hidden_or_built(p.relative_to(ROOT)))
    for path in sorted(scripts):
        for line, module, name in gpucap_imports(ast.parse(path.read_text())):
            if name is not None and not hasattr(importlib.import_module(module), name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"{path.relative_to(ROOT)}:{line}: {name} from {module}")
    assert not missing, "\n".join(missing)


def _hidden_or_built(path: Path) -> bool:
    """A path under a hidden folder (the end-to-end suite's own ``.venv``) or a run's output."""
    return any(part.startswith(".") or part in ("out", "site-packages") for part in path.parts[:-1])


def test_a_declaration_that_is_not_a_from_import_is_refused(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import gpucap.physics.step\n")
    with pytest.raises(TypeError, match="line 3: only 'from gpucap.x import y as y' belongs here"):
        public_names("somepackage", str(init))


def test_a_name_is_imported_on_first_use_only() -> None:
    """``import gpucap.report`` leaves matplotlib's figure modules alone until a figure is asked for."""
    code = (
        "import sys, gpucap.report\n"
        "before = 'gpucap.report.plots' in sys.modules\n"
        "gpucap.report.sweep_figure\n"
        "print(before, 'gpucap.report.plots' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]
