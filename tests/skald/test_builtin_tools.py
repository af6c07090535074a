"""The built-in tools against real rows (the file tools: tests/skald/test_workspace.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop.cancellation import CancelToken
from loop.errors import HumanNeeded, ToolError
from loop.ports import ToolContext, TurnScope
from skald.tools.catalog import BUILTIN_TOOLS


def context(tmp_path: Path, session_id: int = 1, **extras) -> ToolContext:
    scope = TurnScope(session_id=session_id, exchange_id=1, principal="user:1", user_id=1, agent="t",
                      workspace=tmp_path / "ws", extras=extras)
    return ToolContext(scope=scope, call_key="e1:t1:c0", cancel=CancelToken(), timeout=5)


def run(name: str, args: dict, ctx: ToolContext) -> str:
    tool = BUILTIN_TOOLS.get(name)
    assert tool is not None
    return tool.run(args, ctx)


def test_ask_human_hands_off_with_its_question(tmp_path):
    with pytest.raises(HumanNeeded) as handoff:
        run("ask_human", {"question": "restart?"}, context(tmp_path))
    assert handoff.value.question == "restart?"


@pytest.mark.django_db
def test_search_knowledge_reads_accepted_entries_only(tmp_path):
    from proposals.models import KnowledgeEntry
    from skald.core import clock

    now = clock.now()
    KnowledgeEntry.objects.create(slug="pool", title="DB pool exhaustion", body="raise max_pool", created_at=now,
                                  updated_at=now)
    found = run("search_knowledge", {"query": "checkout pool exhausted"}, context(tmp_path))
    assert "DB pool exhaustion" in found
    assert run("search_knowledge", {"query": "kerberos"}, context(tmp_path)) == "No accepted knowledge matches."


@pytest.mark.django_db
def test_read_logs_reads_the_case_of_the_session(tmp_path):
    from audit.actors import Actor
    from skald.cases.services import case_create

    case = case_create(actor=Actor.system("t"), title="c", logs=[("app.log", "FATAL pool"), ("db.log", "ok")])
    assert "FATAL pool" in run("read_logs", {}, context(tmp_path, case_id=case.pk))
    assert run("read_logs", {"name": "db.log"}, context(tmp_path, case_id=case.pk)) == "== db.log ==\nok"
    with pytest.raises(ToolError):
        run("read_logs", {}, context(tmp_path))
