"""One AgentDojo suite's tools as a real MCP server (issue 30's measurement, docs/provenance.md):
``python tests/dojo/suite_server.py <suite>`` over stdio, the SDK's server API, no Django.

Each tool is the suite's own environment function (``agentdojo``'s ``Function``), with its own
parameters as the input schema; a read (:func:`is_read`) is annotated ``readOnlyHint``. The
environment is the suite's default one with the current scenario's injections planted
(``MCP_DOJO_STATE``/``scenario.json``: an id and the injection vectors' texts, written by the harness
before each run); a new id starts a fresh environment. Every call the server executes is appended to
``MCP_DOJO_STATE``/``calls.jsonl``: what really ran.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import Function, FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.load_suites import get_suite
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

VERSION = "v1.2.2"
# The suites' functions carry no annotations: the server declares its reads (``readOnlyHint``) by
# name, as a real server would declare them. The harness's operator allows the same tools.
READ_PREFIXES = ("get_", "search_", "list_", "read_", "check_")


def is_read(function: str) -> bool:
    return function.startswith(READ_PREFIXES)


class Scenario:
    """The environment of the scenario the harness names, rebuilt when the name changes."""

    def __init__(self, suite_name: str, state: Path) -> None:
        self.suite = get_suite(VERSION, suite_name)
        self.runtime = FunctionsRuntime(self.suite.tools)
        self.state = state
        self.current: str | None = None
        self.environment: TaskEnvironment | None = None

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        wanted = json.loads((self.state / "scenario.json").read_text(encoding="utf-8"))
        if wanted["id"] != self.current or self.environment is None:
            self.environment = self.suite.load_and_inject_default_environment(wanted["injections"])
            self.current = wanted["id"]
        with (self.state / "calls.jsonl").open("a", encoding="utf-8") as log:
            log.write(json.dumps({"scenario": self.current, "tool": name, "args": arguments}, default=str) + "\n")
        result, error = self.runtime.run_function(self.environment, name, arguments)
        return f"Error: {error}" if error else tool_result_to_str(result)


def _tool(scenario: Scenario, function: Function) -> Any:
    """A callable whose signature is the function's parameters (the SDK reads the schema from it)."""

    def run(**arguments: Any) -> str:
        return scenario.call(function.name, arguments)

    fields = function.parameters.model_fields
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=field.annotation,
                           default=inspect.Parameter.empty if field.is_required() else field.default)
         for name, field in fields.items()], return_annotation=str)
    run.__name__ = function.name
    return run


def build(suite_name: str, state: Path) -> MCPServer:
    scenario = Scenario(suite_name, state)
    server = MCPServer(f"agentdojo-{suite_name}")
    for function in scenario.suite.tools:
        server.add_tool(_tool(scenario, function), name=function.name, description=function.description,
                        annotations=ToolAnnotations(read_only_hint=is_read(function.name)))
    return server


if __name__ == "__main__":
    build(sys.argv[1], Path(os.environ["MCP_DOJO_STATE"])).run("stdio")
    sys.exit(0)
