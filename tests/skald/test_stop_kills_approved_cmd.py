"""``/stop`` during an approved ``execute_cmd`` kills the command's whole process group (SPEC L11,
L12, R3), and the exchange settles only after the call has: its receipt covers every event.

A real subprocess on the real approval path: the default rules park ``execute_cmd``, an approver
answers through the API, the resolver runs the command, the owner stops the session. The proof is
by pid, not by time: the shell and the grandchild it put in the background are gone (or reaped
zombies) once the exchange has settled.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from approvals.models import ApprovalStatus, PendingApproval
from approvals.rules.seed import default_rules_ensure
from loop.models import Exchange, SessionEvent, ToolCall, ToolCallStatus
from loop.providers.loopback import text_turn, tool_turn
from loop.verify import load_session_rows, verify_rows
from skald.models import Agent, AgentKind
from skald.sessions.services import session_create, session_message_submit, session_stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has already been killed)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(path: Path, limit: float = 20.0) -> int:
    """The pid the command wrote (polled: the command is a separate process we cannot signal on)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def test_a_stop_kills_an_approved_commands_process_group(alice, carol, api, script, settings, tmp_path,
                                                           inline_tasks):
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "sh"
    # The pids are read from outside the workspace: unconfined here; the confined group kill is
    # proved in tests/loop/tools/test_sandbox.py.
    settings.SKALD_EXEC_SANDBOX = "off"
    default_rules_ensure()
    Agent.objects.create(name="runner", kind=AgentKind.CHAT, allowed_tools=["execute_cmd"])
    leader_file, child_file = tmp_path / "leader.pid", tmp_path / "child.pid"
    command = f"echo $$ > {leader_file}; sleep 300 & echo $! > {child_file}; wait"
    script(tool_turn(("execute_cmd", {"argv": ["sh", "-c", command]})), text_turn("never reached"))
    session = session_create(user=alice, agent="runner", title="stop a command")
    exchange, _ = session_message_submit(user=alice, session=session, content="run it")
    approval = PendingApproval.objects.get(status=ApprovalStatus.PENDING, tool="execute_cmd")
    answered: dict[str, int] = {}

    def approve() -> None:  # the resolver runs the command inline, in this thread, until the stop
        try:
            response = api(carol).post(f"/api/tools/{approval.tool_call_id}/resolve", {"decision": "approve"},
                                       format="json")
            answered["status"] = response.status_code
        finally:
            connection.close()

    resolver = threading.Thread(target=approve)
    resolver.start()
    leader, child = wait_for(leader_file), wait_for(child_file)
    assert alive(leader) and alive(child)

    session_stop(user=alice, session=session)
    resolver.join(30)

    assert not resolver.is_alive() and answered["status"] == 202
    exchange = Exchange.objects.get(pk=exchange.pk)
    assert exchange.outcome == "canceled"
    assert not alive(leader) and not alive(child)  # the whole group, the backgrounded sleep too
    call = ToolCall.objects.get(pk=approval.tool_call_id)
    assert call.status == ToolCallStatus.CANCELED
    last = SessionEvent.objects.filter(exchange=exchange).order_by("-seq").first()
    assert exchange.receipt["last_seq"] == last.seq  # no tool_result lands after the receipt
    assert verify_rows(load_session_rows(session.pk)) == []
