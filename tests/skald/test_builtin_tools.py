"""The built-in tools against real rows and a real workspace directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loop.cancellation import CancelToken
from loop.errors import HumanNeeded, ToolError
from loop.ports import ToolContext, TurnScope
from skald.sessions.workspace import read_current, resolve_in_workspace
from skald.tools.catalog import BUILTIN_TOOLS


def context(tmp_path: Path, session_id: int = 1, **extras) -> ToolContext:
    scope = TurnScope(session_id=session_id, exchange_id=1, principal="user:1", user_id=1, agent="t",
                      workspace=tmp_path / "ws", extras=extras)
    return ToolContext(scope=scope, call_key="e1:t1:c0", cancel=CancelToken(), timeout=5)


def run(name: str, args: dict, ctx: ToolContext) -> str:
    tool = BUILTIN_TOOLS.get(name)
    assert tool is not None
    return tool.run(args, ctx)


def test_files_round_trip_inside_the_workspace(tmp_path):
    ctx = context(tmp_path)
    assert run("write_file", {"path": "reports/a.md", "content": "hello"}, ctx) == "wrote 5 bytes to reports/a.md"
    assert run("read_file", {"path": "reports/a.md"}, ctx) == "hello"
    assert (tmp_path / "ws" / "reports" / "a.md").read_text() == "hello"


@pytest.mark.parametrize("path", ["../outside.txt", "reports/../../outside.txt", "/etc/passwd", "a/\x00b", "", " "])
def test_traversal_and_absolute_paths_are_refused(tmp_path, path):
    with pytest.raises(ToolError) as refused:
        run("write_file", {"path": path, "content": "x"}, context(tmp_path))
    assert refused.value.code in {"path_outside_workspace", "path_invalid"}
    assert not (tmp_path / "outside.txt").exists()


def test_a_symlink_escape_is_refused_for_reads_and_writes(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    ws = tmp_path / "ws"
    ws.mkdir()
    os.symlink(secret, ws / "link.txt")
    os.symlink(tmp_path, ws / "dir")
    ctx = context(tmp_path)
    for args in ({"path": "link.txt"}, {"path": "dir/secret.txt"}):
        with pytest.raises(ToolError):
            run("read_file", args, ctx)
    with pytest.raises(ToolError):
        run("write_file", {"path": "dir/new.txt", "content": "x"}, ctx)
    with pytest.raises(ToolError):
        run("write_file", {"path": "link.txt", "content": "overwrite"}, ctx)
    assert secret.read_text() == "top secret" and not (tmp_path / "new.txt").exists()


def test_the_preview_resolver_is_the_tool_resolver(tmp_path):
    ws = tmp_path / "ws"
    assert read_current(ws, "missing.md") is None
    assert resolve_in_workspace(ws, "a/b.md") == (ws / "a" / "b.md").resolve()


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


@pytest.mark.django_db(transaction=True)
def test_execute_cmd_runs_only_allow_listed_programs_in_the_workspace(tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "echo,pwd"
    ctx = context(tmp_path)
    assert "stdout:\nhello $(id)\n" in run("execute_cmd", {"argv": ["echo", "hello", "$(id)"]}, ctx)
    assert str((tmp_path / "ws").resolve()) in run("execute_cmd", {"argv": ["pwd"]}, ctx)
    with pytest.raises(ToolError) as denied:
        run("execute_cmd", {"argv": ["cat", "/etc/passwd"]}, ctx)
    assert denied.value.code == "exec_denied"
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = ""
    with pytest.raises(ToolError):
        run("execute_cmd", {"argv": ["echo", "x"]}, ctx)
