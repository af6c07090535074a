"""Progress of an MCP call: a live ``tool.progress`` delta to the call's own session (the console's
status line) and, for a call inside an async task, a ``task.progress`` delta to the task's parent
conversation (its task strip and status line). The reporter is the one the pool calls for each
``notifications/progress`` (the end-to-end path from a real server: test_mcp_stdio.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loop.cancellation import CancelToken
from loop.ports import ToolContext, TurnScope
from skald.agents.seed import seed_agents
from skald.jobs.services import job_submit_task
from skald.loop_adapters import bus
from skald.loop_adapters.translate import translate_delta
from skald.mcp.tools import McpToolProxy
from skald.sessions.services import session_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, dict[str, Any]]]:
    seen: list[tuple[int, dict[str, Any]]] = []
    monkeypatch.setattr(bus.ChannelsBus, "delta", lambda self, session_id, payload: seen.append((session_id,
                                                                                                dict(payload))))
    return seen


def reporter(session_id: int, user_id: int) -> Any:
    proxy = McpToolProxy(name="mcp__demo__steps", description="", parameters={}, server="demo", tool="steps")
    scope = TurnScope(session_id=session_id, exchange_id=11, principal=f"user:{user_id}", user_id=user_id,
                      agent="log-analyst", workspace=Path("/nonexistent"))
    return proxy._reporter(ToolContext(scope=scope, call_key="c1", cancel=CancelToken(), timeout=None, call_id=5))


def test_progress_inside_an_async_task_reaches_its_parent_conversations_task_strip(alice, sent):
    seed_agents()
    parent = session_create(user=alice, title="parent")
    job = job_submit_task(owner_id=alice.pk, source="web", parent_session_id=parent.pk, parent_exchange_id=None,
                          parent_call_id=None, agent="log-analyst", task="look", tools=[], client="",
                          selection={}, scope_extras={})
    report = reporter(job.child_session_id, alice.pk)

    report(1, 3, "step 1")
    report(2, None, None)

    said = {"tool": "mcp__demo__steps", "progress": 1, "total": 3, "message": "step 1"}
    assert sent[:2] == [(job.child_session_id, {"type": "tool.progress", "exchange": 11, "call": 5, **said}),
                        (parent.pk, {"type": "task.progress", "job": job.pk, **said})]
    assert sent[3] == (parent.pk, {"type": "task.progress", "job": job.pk, "tool": "mcp__demo__steps",
                                   "progress": 2, "total": None, "message": ""})
    assert len(sent) == 4


def test_progress_in_a_conversation_of_its_own_goes_to_that_conversation_only(alice, sent):
    seed_agents()
    session = session_create(user=alice, title="plain")

    reporter(session.pk, alice.pk)(1, 2, "half")

    assert [(sid, p["type"]) for sid, p in sent] == [(session.pk, "tool.progress")]


def test_the_socket_passes_task_progress_and_elicitation_cards_through_by_their_type():
    for kind in ("tool.progress", "task.progress", "mcp.elicitation"):
        assert translate_delta({"type": kind, "job": 3})["type"] == kind
