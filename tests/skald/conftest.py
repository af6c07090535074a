"""Fixtures for delegation and jobs through Skald's own wiring: the seeded agents, a gate that
allows everything (or the real approval rules), inline tasks, and a conversation to start from."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from loop.models import Exchange, Session, SessionEvent, ToolCall
from loop.ports import GateCall, GateVerdict, TurnScope
from skald.agents.seed import seed_agents
from skald.loop_adapters.runtime import set_gate_factory
from skald.sessions.services import session_create, session_message_submit


class AllowAll:
    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        return GateVerdict("allow") if scope is not None else GateVerdict("deny", "no scope")

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        raise AssertionError("nothing parks under AllowAll")


@pytest.fixture
def agents(db: None) -> None:
    seed_agents()


@pytest.fixture
def allow_all() -> Iterator[None]:
    set_gate_factory(AllowAll)
    yield
    set_gate_factory(None)


@pytest.fixture
def inline_tasks(settings: Any) -> None:
    settings.SKALD_SYNC_TASKS = True


@pytest.fixture
def conversation(alice, agents) -> Session:
    return session_create(user=alice, agent="troubleshooter", title="delegation")


@pytest.fixture
def say(alice, conversation) -> Callable[[str], Exchange]:
    def send(content: str, key: str | None = None) -> Exchange:
        exchange, _ = session_message_submit(user=alice, session=conversation, content=content, request_key=key)
        exchange.refresh_from_db()
        return exchange

    return send


def conversation_kinds(session: Session, narrative: str = "") -> list[str]:
    return list(SessionEvent.objects.filter(session=session, narrative=narrative).order_by("seq")
                .values_list("kind", flat=True))


def task_completed_calls(session: Session) -> list[ToolCall]:
    return list(ToolCall.objects.filter(session=session, tool="task_completed").order_by("id"))
