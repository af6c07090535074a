"""A tool's effect after its work is fenced and, in the workspace, a compare-and-set (issue 28 §2).

A worker that stalled past its lease and was taken over writes nothing; a command whose starting
files changed meanwhile never overwrites the newer version. Each refusal is recorded as a
``control:effect_refused`` row and a ``skald.effect.refused`` audit row, and the local copy of the
workspace is gone when the command ends. Marked ``db_sensitive``: SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.cancellation import CancelToken
from loop.errors import LeaseLost
from loop.events import EventKind
from loop.models import Exchange, SessionEvent
from loop.ports import ToolContext, TurnScope
from skald.admin.timeline import describe
from skald.loop_adapters.store import kernel_store
from skald.sessions.workspace import (
    read_current,
    workspace_delete,
    workspace_materialise,
    workspace_sync_back,
    workspace_write,
)
from skald.tools.catalog import BUILTIN_TOOLS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


@pytest.fixture
def session_id(alice) -> int:
    return kernel_store().create_session(owner_id=alice.pk, agent="troubleshooter", source="web", title="ws",
                                         principal=f"user:{alice.pk}").pk


@pytest.fixture
def exchange_id(alice, session_id) -> int:
    """An exchange worker A drives (its claim is ``worker-a``)."""
    return kernel_store().exchanges.admit(session_id=session_id, request_key="k1", content="go",
                                          principal=f"user:{alice.pk}", config={},
                                          claim_token="worker-a").exchange.pk


def taken_over(exchange_id: int) -> None:
    """Worker A's lease lapsed and worker B claimed the exchange (the claim is what the fence reads;
    tests/loop/test_hold_fence.py takes it over through ``claim_for_recovery``)."""
    assert Exchange.objects.filter(pk=exchange_id).update(claim_token="worker-b") == 1


def on_worker_a(root: Path, session_id: int, exchange_id: int, user_id: int) -> ToolContext:
    scope = TurnScope(session_id=session_id, exchange_id=exchange_id, principal=f"user:{user_id}", user_id=user_id,
                      agent="troubleshooter", workspace=root / f"session-{session_id}")
    return ToolContext(scope=scope, call_key=f"e{exchange_id}:t1:c0", cancel=CancelToken(), timeout=5,
                       fence=(exchange_id, "worker-a"))


def run(name: str, args: dict, ctx: ToolContext) -> str:
    tool = BUILTIN_TOOLS.get(name)
    assert tool is not None
    return tool.run(args, ctx)


def refusals(session_id: int) -> list[dict]:
    return [event.payload for event in SessionEvent.objects.filter(session_id=session_id,
                                                                   kind=EventKind.EFFECT_REFUSED).order_by("seq")]


def put(session_id: int, path: str, text: str, user_id: int) -> None:
    workspace_write(session_id=session_id, path=path, data=text.encode(), actor=Actor("user", str(user_id)))


def test_a_command_of_the_lease_holder_lands_and_leaves_no_local_copy(alice, session_id, exchange_id, tmp_path,
                                                                       settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "cp"
    put(session_id, "notes.md", "v1\n", alice.pk)
    ctx = on_worker_a(tmp_path, session_id, exchange_id, alice.pk)
    assert "workspace files changed: copy.md" in run("execute_cmd", {"argv": ["cp", "notes.md", "copy.md"]}, ctx)
    assert read_current(session_id, "copy.md") == "v1\n"
    assert not ctx.scope.workspace.exists()  # other sessions' files never stay on a worker's disk
    assert refusals(session_id) == []


def test_a_command_of_a_worker_taken_over_writes_nothing_and_the_refusal_is_recorded(
        alice, session_id, exchange_id, tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "cp"
    put(session_id, "notes.md", "v1\n", alice.pk)
    ctx = on_worker_a(tmp_path, session_id, exchange_id, alice.pk)
    taken_over(exchange_id)
    written_before = AuditEvent.objects.filter(kind=AuditKind.WORKSPACE_FILE_WRITTEN).count()

    with pytest.raises(LeaseLost):
        run("execute_cmd", {"argv": ["cp", "notes.md", "copy.md"]}, ctx)

    assert read_current(session_id, "copy.md") is None
    assert AuditEvent.objects.filter(kind=AuditKind.WORKSPACE_FILE_WRITTEN).count() == written_before
    assert refusals(session_id) == [{"tool": "execute_cmd", "call": ctx.call_key, "targets": ["copy.md"],
                                     "reason": "lease_lost"}]
    audited = AuditEvent.objects.get(kind=AuditKind.EFFECT_REFUSED)
    assert json.loads(audited.payload)["reason"] == "lease_lost"
    assert not ctx.scope.workspace.exists()


def test_a_stale_sync_back_is_refused_where_the_file_changed_and_applied_where_it_did_not(
        alice, session_id, exchange_id, tmp_path):
    put(session_id, "notes.md", "v1\n", alice.pk)
    put(session_id, "old.md", "old\n", alice.pk)
    local = workspace_materialise(session_id=session_id, root=tmp_path / "a")
    # While A's command runs, B writes a newer version of notes.md.
    put(session_id, "notes.md", "v2 from B\n", alice.pk)
    (local.root / "notes.md").write_text("stale from A\n")
    (local.root / "new.md").write_text("new from A\n")
    (local.root / "old.md").unlink()

    synced = workspace_sync_back(session_id=session_id, materialised=local, actor=Actor("user", str(alice.pk)),
                                 fence=kernel_store().fenced(exchange_id, "worker-a"), call_key="e1:t1:c0")

    assert (sorted(synced.changed), synced.refused) == (["new.md", "old.md"], ["notes.md"])
    assert read_current(session_id, "notes.md") == "v2 from B\n"  # never overwritten
    assert read_current(session_id, "new.md") == "new from A\n" and read_current(session_id, "old.md") is None
    assert refusals(session_id) == [{"tool": "execute_cmd", "call": "e1:t1:c0", "targets": ["notes.md"],
                                     "reason": "stale_version"}]


def test_a_file_another_writer_created_or_deleted_meanwhile_is_left_as_they_left_it(alice, session_id, tmp_path):
    put(session_id, "gone.md", "v1\n", alice.pk)
    local = workspace_materialise(session_id=session_id, root=tmp_path / "a")
    put(session_id, "made.md", "B made it\n", alice.pk)  # absent when the command started
    assert workspace_delete(session_id=session_id, path="gone.md", actor=Actor("user", str(alice.pk)))
    (local.root / "made.md").write_text("A made it too\n")
    (local.root / "gone.md").write_text("A changed it\n")

    synced = workspace_sync_back(session_id=session_id, materialised=local, actor=Actor("user", str(alice.pk)))

    assert (synced.changed, sorted(synced.refused)) == ([], ["gone.md", "made.md"])
    assert read_current(session_id, "made.md") == "B made it\n" and read_current(session_id, "gone.md") is None


def test_a_file_deleted_by_a_command_is_kept_when_another_writer_changed_it(alice, session_id, tmp_path):
    put(session_id, "notes.md", "v1\n", alice.pk)
    local = workspace_materialise(session_id=session_id, root=tmp_path / "a")
    put(session_id, "notes.md", "v2\n", alice.pk)
    (local.root / "notes.md").unlink()
    synced = workspace_sync_back(session_id=session_id, materialised=local, actor=Actor("user", str(alice.pk)))
    assert (synced.changed, synced.refused) == ([], ["notes.md"])
    assert read_current(session_id, "notes.md") == "v2\n"


def test_write_file_of_a_worker_taken_over_writes_nothing(alice, session_id, exchange_id, tmp_path):
    put(session_id, "notes.md", "v2 from B\n", alice.pk)
    ctx = on_worker_a(tmp_path, session_id, exchange_id, alice.pk)
    taken_over(exchange_id)
    with pytest.raises(LeaseLost):
        run("write_file", {"path": "notes.md", "content": "stale from A\n"}, ctx)
    assert read_current(session_id, "notes.md") == "v2 from B\n"
    assert [r["tool"] for r in refusals(session_id)] == ["write_file"]


def test_scratchpad_set_of_a_worker_taken_over_stores_nothing(alice, session_id, exchange_id, tmp_path):
    ctx = on_worker_a(tmp_path, session_id, exchange_id, alice.pk)
    assert run("scratchpad_set", {"key": "plan", "value": "A's"}, ctx) == "stored plan"
    taken_over(exchange_id)
    with pytest.raises(LeaseLost):
        run("scratchpad_set", {"key": "plan", "value": "stale"}, ctx)
    assert kernel_store().scratchpad_get(session_id, "plan") == "A's"
    assert refusals(session_id)[0]["targets"] == ["scratchpad:plan"]


@pytest.mark.parametrize("argv", [["false"], ["sleep", "5"]], ids=["fails", "times-out"])
def test_the_local_copy_is_removed_however_the_command_ends(alice, session_id, exchange_id, tmp_path, settings,
                                                            argv):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "false,sleep"
    put(session_id, "notes.md", "v1\n", alice.pk)
    ctx = on_worker_a(tmp_path, session_id, exchange_id, alice.pk)
    ctx = ToolContext(scope=ctx.scope, call_key=ctx.call_key, cancel=ctx.cancel, timeout=0.2, fence=ctx.fence)
    run("execute_cmd", {"argv": argv}, ctx)
    assert not ctx.scope.workspace.exists()


def test_a_cancelled_command_leaves_no_local_copy(alice, session_id, exchange_id, tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "sleep"
    ctx = on_worker_a(tmp_path, session_id, exchange_id, alice.pk)
    ctx.cancel.cancel("stop requested")
    run("execute_cmd", {"argv": ["sleep", "5"]}, ctx)
    assert not ctx.scope.workspace.exists()


def test_a_refused_effect_reads_in_words_on_the_timeline(alice, session_id, exchange_id, tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "cp"
    put(session_id, "notes.md", "v1\n", alice.pk)
    taken_over(exchange_id)
    with pytest.raises(LeaseLost):
        run("execute_cmd", {"argv": ["cp", "notes.md", "copy.md"]},
            on_worker_a(tmp_path, session_id, exchange_id, alice.pk))
    row = SessionEvent.objects.get(session_id=session_id, kind=EventKind.EFFECT_REFUSED)
    line = describe(row, agent="troubleshooter", user="alice")
    assert "refused a stale write by execute_cmd to copy.md" in line.text and "took over" in line.text
    assert line.outcome == "conflict"
