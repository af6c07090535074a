"""The floors hold: every module has a floor, and no import circle needs a function-level import.

The layers contract itself is checked by `lint-imports` in `make test`; these tests keep the
contract honest as the tree grows.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import grimp
import pytest

BASE = Path(__file__).resolve().parents[2]
APPS = ("loop", "skald", "approvals", "proposals", "audit")


def _layer_modules() -> set[str]:
    config = tomllib.loads((BASE / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    return {name.strip() for layer in layers for name in layer.replace("|", ":").split(":")}


def test_every_top_level_skald_module_stands_on_a_floor():
    assigned = _layer_modules()
    modules = {f"skald.{p.stem}" for p in (BASE / "skald").glob("*.py") if p.stem != "__init__"}
    modules |= {f"skald.{p.name}" for p in (BASE / "skald").iterdir()
                if (p / "__init__.py").exists() and p.name != "migrations"}
    assert modules - assigned == set(), "add the new module to a floor in pyproject.toml's layers contract"


def _graph(*extra: str) -> grimp.ImportGraph:
    return grimp.build_graph(*APPS, *extra, include_external_packages=False, cache_dir=None)


def _cycle(graph: grimp.ImportGraph, modules: set[str]) -> list[str] | None:
    edges: dict[str, set[str]] = defaultdict(set)
    for module in modules:
        edges[module] = {m for m in graph.find_modules_directly_imported_by(module) if m in modules}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(modules):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_module_imports_another_that_imports_it_back():
    """grimp sees every import, function-level ones too: a circle cannot hide inside a function. The
    benchmarks are held to it as well."""
    graph = _graph("bench")
    assert _cycle(graph, {m for m in graph.modules if ".migrations" not in m}) is None


@pytest.mark.slow
@pytest.mark.parametrize("app", APPS)
def test_each_app_imports_in_a_fresh_interpreter(app):
    """Every module of the app imports in a fresh interpreter right after django.setup(). With the
    graph free of circles (above), no module depends on another having been imported first."""
    modules = sorted(m for m in _graph().modules if m.split(".")[0] == app and ".migrations" not in m)
    script = (
        "import importlib, os, sys\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'skald.settings')\n"
        "import django\n"
        "django.setup(set_prefix=False)\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, *modules], cwd=BASE, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
