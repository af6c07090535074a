"""The tool registry: tools by name with their JSON schemas. Unknown names are loud refusals."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loop.ports import Tool, ToolContext
from loop.providers.base import ToolSpec
from loop.tools.hints import RestartHint


@dataclass(frozen=True)
class FunctionTool:
    """A tool backed by a plain function ``fn(arguments, context) -> str``."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Any = field(repr=False)
    concurrency_safe: bool = False
    restart_hint: str = RestartHint.RERUN
    trust: str = "trusted"  # the label of its results (loop/provenance.py)
    writes_path: str | None = None  # the argument naming the workspace file it writes
    reads_path: str | None = None  # … or reads
    read_only: bool | None = None  # for provenance's rules; None: ``concurrency_safe``

    def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        return str(self.fn(arguments, context))


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"tool {tool.name!r} registered twice")
            self._tools[tool.name] = tool
        self._specs = tuple(
            ToolSpec(name=t.name, description=t.description, parameters=dict(t.parameters))
            for t in self._tools.values()
        )

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return self._specs

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """Capability subtraction: only tools this registry already has (never addition)."""
        wanted = set(names)
        return ToolRegistry(tool for name, tool in self._tools.items() if name in wanted)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)
