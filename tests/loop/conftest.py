"""Kernel fixtures: the real store on the test database, in-memory ports, a scripted gate, test tools.

Nothing here comes from ``skald``: the kernel is tested through its own ports (tests/loop/fakes.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from loop.bounds import Bounds
from loop.driver import LoopEnv
from loop.models import Session
from loop.ports import AgentSpec, ToolContext, TurnScope
from loop.providers.base import LlmProvider
from loop.store import Store
from loop.tools.registry import FunctionTool, ToolRegistry
from tests.loop.fakes import MemoryAuditSink, MemoryBus, ScriptedGate, SteppingClock


def _echo(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return f"echo: {arguments.get('text', '')}"


def _big(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return "x" * int(arguments.get("bytes", 100 * 1024))


def _wait(arguments: Mapping[str, Any], context: ToolContext) -> str:
    """Waits on its call's token (a stop or the tool timeout ends it early)."""
    cancelled = context.cancel.wait(float(arguments.get("seconds", 0)))
    return "woken early" if cancelled else "waited"


OBJ: dict[str, Any] = {"type": "object"}
ECHO = FunctionTool("echo", "Echo text back.", {"type": "object", "properties": {"text": {"type": "string"}}}, _echo,
                    concurrency_safe=True)
BIG = FunctionTool("big_output", "Emit many bytes.", OBJ, _big)
NAP = FunctionTool("nap", "Wait a while.", OBJ, _wait, concurrency_safe=True)
NAP_UNSAFE = FunctionTool("nap_unsafe", "Wait a while (not concurrency safe).", OBJ, _wait)
TEST_TOOLS = ToolRegistry([ECHO, BIG, NAP, NAP_UNSAFE])

__all__ = ["TEST_TOOLS", "ScriptedGate"]


@pytest.fixture
def alice(db: None) -> User:
    """The operator who owns the kernel's test sessions (a plain user: the kernel knows no roles)."""
    return User.objects.create_user(username="alice")


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def bus() -> MemoryBus:
    return MemoryBus()


@pytest.fixture
def clock() -> SteppingClock:
    return SteppingClock()


@pytest.fixture
def store(audit: MemoryAuditSink, bus: MemoryBus, clock: SteppingClock) -> Store:
    return Store(audit=audit, clock=clock, bus=bus)


@pytest.fixture
def session(alice: User, store: Store) -> Session:
    return store.create_session(owner_id=alice.pk, agent="tester", source="web", title="t",
                                principal=f"user:{alice.pk}")


@pytest.fixture
def make_env(session: Session, store: Store, bus: MemoryBus, tmp_path: Path) -> Callable[..., LoopEnv]:
    def build(provider: LlmProvider, *, tools: ToolRegistry = TEST_TOOLS, gate: Any = None,
              bounds: Bounds | None = None, **extra: Any) -> LoopEnv:
        agent = AgentSpec(name="tester", kind="chat", system_prompt="You test.", tools=tools.names(), client="")
        scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{session.owner_id}",
                          user_id=session.owner_id, agent="tester", workspace=tmp_path / "ws")
        return LoopEnv(store=store, provider=provider, tools=tools, gate=gate or ScriptedGate(),
                       agent=agent, scope=scope, bus=bus, bounds=bounds or Bounds(), **extra)

    return build
