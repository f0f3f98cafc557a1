"""A subpackage's public names, declared once and imported when first used (PEP 562).

A subpackage's ``__init__.py`` lists its public names as imports under ``if TYPE_CHECKING:``,
each in the re-export form ``from gpucap.physics.step import step_time as step_time`` (or
``from gpucap.teaching import seeds as seeds`` for a module), and ends with::

    __getattr__, __dir__, __all__ = public_names(__name__, __file__)

Type checkers and linters read the imports; at run time this module reads the same block from
the file and imports a name's module on first access, so ``import gpucap.physics`` stays cheap
and ``from gpucap.calibration import read_results`` brings in only what ``read_results`` needs.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _declared(package: str, init_file: str) -> dict[str, tuple[str, str | None]]:
    """``{public name: (module, attribute or None for the module itself)}`` from the
    ``if TYPE_CHECKING:`` imports of ``init_file``."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"))
    blocks = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    names: dict[str, tuple[str, str | None]] = {}
    for node in (n for block in blocks for n in block.body):
        if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
            raise TypeError(f"{init_file}: line {node.lineno}: only 'from gpucap.x import y as y' belongs here")
        for alias in node.names:
            name = alias.asname or alias.name
            if node.module == package:
                names[name] = (f"{package}.{alias.name}", None)
            else:
                names[name] = (node.module, alias.name)
    return names


def public_names(package: str, init_file: str) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The package's ``__getattr__``, ``__dir__`` and ``__all__`` for the names its
    ``if TYPE_CHECKING:`` block imports.

    A public name that is also a submodule's name must be that submodule: Python binds a
    submodule to its package's attribute once it is imported, which would shadow a function of
    the same name, so such a declaration raises here."""
    names = _declared(package, init_file)
    folder = Path(init_file).parent
    for name, (_module, attr) in names.items():
        if attr is not None and (folder / f"{name}.py").exists():
            raise TypeError(
                f"{init_file}: public name {name!r} is also the module {package}.{name}; "
                f"export the function from the package above or rename it"
            )

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = names[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
        setattr(sys.modules[package], name, value)  # the next access is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(names) | set(vars(sys.modules[package])))

    return __getattr__, __dir__, sorted(names)
