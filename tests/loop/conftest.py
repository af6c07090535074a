"""Kernel fixtures: a real store (audited into the real chain), a scripted provider, test tools."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from loop.bounds import Bounds
from loop.driver import LoopEnv
from loop.ports import AgentSpec, GateCall, GateVerdict, ToolContext, TurnScope
from loop.providers.base import LlmProvider
from loop.tools.registry import FunctionTool, ToolRegistry
from skald.loop_adapters.bus import ChannelsBus
from skald.loop_adapters.store import kernel_store


class ScriptedGate:
    """allow unless the tool is listed in ``deny`` or ``require``."""

    def __init__(self, deny: set[str] | None = None, require: set[str] | None = None) -> None:
        self.deny = deny or set()
        self.require = require or set()
        self.parked: list[GateCall] = []

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        if scope is None or call.tool in self.deny:
            return GateVerdict("deny", "scripted deny")
        if call.tool in self.require:
            return GateVerdict("require", "scripted require")
        return GateVerdict("allow")

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        self.parked.append(call)
        return {"reason": verdict.reason}


def _echo(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return f"echo: {arguments.get('text', '')}"


def _big(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return "x" * int(arguments.get("bytes", 100 * 1024))


def _sleep(arguments: Mapping[str, Any], context: ToolContext) -> str:
    started = time.monotonic()
    context.cancel.wait(float(arguments.get("seconds", 0.3)))
    return f"slept {time.monotonic() - started:.2f}s on {threading.get_ident()}"


OBJ: dict[str, Any] = {"type": "object"}
ECHO = FunctionTool("echo", "Echo text back.", {"type": "object", "properties": {"text": {"type": "string"}}}, _echo,
                    concurrency_safe=True)
BIG = FunctionTool("big_output", "Emit many bytes.", OBJ, _big)
SLEEP = FunctionTool("nap", "Sleep a while.", OBJ, _sleep, concurrency_safe=True)
SLEEP_UNSAFE = FunctionTool("nap_unsafe", "Sleep a while (not concurrency safe).", OBJ, _sleep)
TEST_TOOLS = ToolRegistry([ECHO, BIG, SLEEP, SLEEP_UNSAFE])


@pytest.fixture
def session(alice, tmp_path: Path):
    return kernel_store().create_session(owner_id=alice.pk, agent="tester", source="web", title="t",
                                         principal=f"user:{alice.pk}")


@pytest.fixture
def make_env(session, tmp_path: Path) -> Callable[..., LoopEnv]:
    def build(provider: LlmProvider, *, tools: ToolRegistry = TEST_TOOLS, gate: Any = None,
              bounds: Bounds | None = None, **extra: Any) -> LoopEnv:
        agent = AgentSpec(name="tester", kind="chat", system_prompt="You test.", tools=tools.names(), client="")
        scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{session.owner_id}",
                          user_id=session.owner_id, agent="tester", workspace=tmp_path / "ws")
        return LoopEnv(store=kernel_store(), provider=provider, tools=tools, gate=gate or ScriptedGate(),
                       agent=agent, scope=scope, bus=ChannelsBus(), bounds=bounds or Bounds(), **extra)

    return build
