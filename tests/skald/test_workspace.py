"""The session workspace is a durable store in the database: every worker sees the same files,
whatever its local root, and every write is audited with its digest."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.cancellation import CancelToken
from loop.errors import ToolError
from loop.ports import ToolContext, TurnScope
from skald.loop_adapters.preview import write_preview
from skald.loop_adapters.store import kernel_store
from skald.models import WorkspaceBlob, WorkspaceFile
from skald.sessions.workspace import read_current, resolve_in_workspace, workspace_materialise
from skald.tools.catalog import BUILTIN_TOOLS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


@pytest.fixture
def session_id(alice) -> int:
    return kernel_store().create_session(owner_id=alice.pk, agent="troubleshooter", source="web", title="ws",
                                         principal=f"user:{alice.pk}").pk


def on_worker(root: Path, session_id: int, user_id: int) -> ToolContext:
    """A tool context as a worker whose local workspace root is ``root`` builds it."""
    scope = TurnScope(session_id=session_id, exchange_id=1, principal=f"user:{user_id}", user_id=user_id,
                      agent="troubleshooter", workspace=root / f"session-{session_id}")
    return ToolContext(scope=scope, call_key="e1:t1:c0", cancel=CancelToken(), timeout=5)


def run(name: str, args: dict, ctx: ToolContext) -> str:
    tool = BUILTIN_TOOLS.get(name)
    assert tool is not None
    return tool.run(args, ctx)


def test_two_workers_with_different_local_roots_see_one_workspace(alice, session_id, tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "cat,cp"
    a = on_worker(tmp_path / "machine-a", session_id, alice.pk)
    b = on_worker(tmp_path / "machine-b", session_id, alice.pk)

    assert run("write_file", {"path": "reports/a.md", "content": "written on A\n"}, a) == \
        "wrote 13 bytes to reports/a.md"
    assert run("read_file", {"path": "reports/a.md"}, b) == "written on A\n"
    # The approval preview made on B diffs against what A wrote, not against B's empty disk.
    preview = write_preview("write_file", {"path": "reports/a.md", "content": "changed\n"}, b.scope)
    assert "-written on A" in preview and "+changed" in preview and "new file" not in preview
    # A command on B runs in a materialised copy, and what it makes is seen back on A.
    assert "written on A" in run("execute_cmd", {"argv": ["cat", "reports/a.md"]}, b)
    output = run("execute_cmd", {"argv": ["cp", "reports/a.md", "copy.md"]}, b)
    assert "workspace files changed: copy.md" in output
    assert run("read_file", {"path": "copy.md"}, a) == "written on A\n"
    assert not (tmp_path / "machine-a").exists()  # A never needed a disk for its file tools


def test_every_write_is_audited_with_its_digest_and_content_is_stored_once(alice, session_id, tmp_path):
    ctx = on_worker(tmp_path, session_id, alice.pk)
    run("write_file", {"path": "one.md", "content": "same"}, ctx)
    run("write_file", {"path": "two.md", "content": "same"}, ctx)
    run("write_file", {"path": "two.md", "content": "same"}, ctx)  # unchanged: no new version, no row
    digest = hashlib.sha256(b"same").hexdigest()
    assert WorkspaceBlob.objects.filter(digest=digest).count() == 1
    rows = AuditEvent.objects.filter(kind=AuditKind.WORKSPACE_FILE_WRITTEN).order_by("seq")
    assert [json.loads(r.payload)["path"] for r in rows] == ["one.md", "two.md"]
    assert {json.loads(r.payload)["digest"] for r in rows} == {digest}
    assert all(r.actor_type == "user" and r.actor_id == str(alice.pk) for r in rows)
    assert WorkspaceFile.objects.get(session_id=session_id, path="two.md").version == 1


@pytest.mark.parametrize("path", ["../outside.txt", "reports/../../outside.txt", "/etc/passwd", "a/\x00b", "", " ",
                                  "C:/windows", "..", "."])
def test_traversal_and_absolute_paths_are_refused(alice, session_id, tmp_path, path):
    with pytest.raises(ToolError) as refused:
        run("write_file", {"path": path, "content": "x"}, on_worker(tmp_path, session_id, alice.pk))
    assert refused.value.code in {"path_outside_workspace", "path_invalid"}
    assert not WorkspaceFile.objects.exists()


def test_paths_are_stored_in_one_canonical_form(alice, session_id, tmp_path):
    ctx = on_worker(tmp_path, session_id, alice.pk)
    run("write_file", {"path": "reports//./a.md", "content": "x"}, ctx)
    assert run("read_file", {"path": "reports/a.md"}, ctx) == "x"
    assert list(WorkspaceFile.objects.values_list("path", flat=True)) == ["reports/a.md"]


def test_a_command_cannot_smuggle_a_file_through_a_symlink(alice, session_id, tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "ln"
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    ctx = on_worker(tmp_path / "root", session_id, alice.pk)
    run("execute_cmd", {"argv": ["ln", "-s", str(secret), "stolen.txt"]}, ctx)
    assert read_current(session_id, "stolen.txt") is None  # links are never read back
    # The link is gone from the next materialisation, and resolving through a link refuses.
    local = workspace_materialise(session_id=session_id, root=ctx.scope.workspace)
    assert not (local.root / "stolen.txt").exists()
    os.symlink(tmp_path, local.root / "dir")
    with pytest.raises(ToolError):
        resolve_in_workspace(local.root, "dir/secret.txt")


def test_a_deleted_file_is_recorded_as_deleted(alice, session_id, tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "rm"
    ctx = on_worker(tmp_path, session_id, alice.pk)
    run("write_file", {"path": "gone.md", "content": "x"}, ctx)
    assert "workspace files changed: gone.md" in run("execute_cmd", {"argv": ["rm", "gone.md"]}, ctx)
    assert read_current(session_id, "gone.md") is None
    assert AuditEvent.objects.filter(kind=AuditKind.WORKSPACE_FILE_DELETED).count() == 1


def test_execute_cmd_runs_only_allow_listed_programs(alice, session_id, tmp_path, settings):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "echo"
    ctx = on_worker(tmp_path, session_id, alice.pk)
    assert "stdout:\nhello $(id)\n" in run("execute_cmd", {"argv": ["echo", "hello", "$(id)"]}, ctx)
    with pytest.raises(ToolError) as denied:
        run("execute_cmd", {"argv": ["cat", "/etc/passwd"]}, ctx)
    assert denied.value.code == "exec_denied"
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = ""
    with pytest.raises(ToolError):
        run("execute_cmd", {"argv": ["echo", "x"]}, ctx)
