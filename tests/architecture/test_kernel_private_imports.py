"""The kernel's seams are public: no module of ``loop/`` reaches into another's private names.

A name another module needs is an interface and says so by having no leading underscore. This
walks every module under ``loop/`` (its syntax tree, nothing is imported) and refuses both spellings
of a cross-module private use: ``from loop.x import _y`` and ``loop.x._y`` (through whatever name
the module ``loop.x`` was bound to). Dunder names (``__version__``) are not private.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

BASE = Path(__file__).resolve().parents[2]
KERNEL = BASE / "loop"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _kernel_modules(root: Path = KERNEL) -> dict[str, Path]:
    return {_module_name(path, root.parent): path for path in sorted(root.rglob("*.py"))
            if "migrations" not in path.parts}


def _is_kernel(module: str) -> bool:
    return module == "loop" or module.startswith("loop.")


def _resolve_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module of ``from <node.module> import …`` written in ``module``."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def private_uses(path: Path, module: str, modules: set[str]) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for every private name of another kernel module that ``path`` uses."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    bound: dict[str, str] = {}  # local name → the kernel module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_kernel(alias.name):
                    continue
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
                for part in alias.name.split(".")[1:]:
                    if _is_private(part):
                        yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(node, module, is_package)
            if not _is_kernel(source):
                continue
            for alias in node.names:
                if _is_private(alias.name) and source != module:
                    yield node.lineno, f"{source}.{alias.name}"
                if f"{source}.{alias.name}" in modules:  # a submodule bound to a local name
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        owner = _dotted(node.value, bound)
        if owner is not None and owner in modules and owner != module:
            yield node.lineno, f"{owner}.{node.attr}"


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The kernel module an expression like ``loop.sql.events`` or ``event_rows`` names, if any."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value, bound)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


def violations(root: Path = KERNEL) -> list[str]:
    modules = _kernel_modules(root)
    names = set(modules)
    return [f"{path.relative_to(root.parent)}:{line}: {what}"
            for module, path in modules.items() for line, what in private_uses(path, module, names)]


def test_no_kernel_module_uses_another_modules_private_names():
    found = violations()
    assert found == [], "private names used across kernel modules (make them public):\n" + "\n".join(found)


def test_it_names_both_spellings_of_a_private_use(tmp_path: Path):
    kernel = tmp_path / "loop"
    (kernel / "sql").mkdir(parents=True)
    (kernel / "__init__.py").write_text("")
    (kernel / "sql" / "__init__.py").write_text("_cursor = None\n__version__ = '1'\n")
    (kernel / "driver.py").write_text("_seam = 1\n")
    (kernel / "cascade.py").write_text(
        "import loop.sql\n"
        "from loop import sql as rows\n"
        "from loop.driver import _seam, __doc__\n"
        "from .driver import _seam as again\n"
        "x = loop.sql._cursor\n"
        "y = rows._cursor\n"
        "z = rows.__version__\n"
    )
    (kernel / "sql" / "own.py").write_text("from loop.sql.own import _mine\n_mine = 1\n")
    assert violations(kernel) == [
        "loop/cascade.py:3: loop.driver._seam",
        "loop/cascade.py:4: loop.driver._seam",
        "loop/cascade.py:5: loop.sql._cursor",
        "loop/cascade.py:6: loop.sql._cursor",
    ]
