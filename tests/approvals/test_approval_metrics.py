"""Approval metrics on /metrics (SPEC O1): gate decisions by action, approval waits, pending calls."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine

from approvals.models import ApprovalStatus, PendingApproval
from approvals.pending.services import pending_approval_resolve
from loop.models import ExchangeStatus
from loop.providers.loopback import text_turn, tool_turn
from skald.core import clock
from skald.sessions.services import session_message_submit

# Not db_sensitive: a feature flow through the ORM paths that tests/loop (store, driver, recovery) and
# the race tests already run on PostgreSQL; it issues no SQL, lock or race of its own.
pytestmark = [pytest.mark.django_db(transaction=True)]

WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\npool exhausted\n"})


def scrape(client) -> dict[str, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    samples = {}
    for line in response.content.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_it_counts_decisions_by_action_and_the_wait_of_a_resolved_approval(client, alice, carol, troubleshooting,
                                                                          script):
    script(tool_turn(("read_logs", {"service": "db"}), WRITE), text_turn("done"))
    start = clock.now()
    with time_machine.travel(start, tick=False):
        exchange, _ = session_message_submit(user=alice, session=troubleshooting, content="investigate")
    exchange.refresh_from_db()
    assert exchange.status == ExchangeStatus.PARKED

    parked = scrape(client)
    assert parked['skald_gate_decisions_total{action="require"}'] >= 1
    assert parked['skald_gate_decisions_total{action="allow"}'] >= 1
    assert parked['skald_gate_decisions_total{action="deny"}'] == 0
    assert parked["skald_approvals_pending"] == 1
    assert parked["skald_approval_wait_seconds_count"] == 0

    with time_machine.travel(start + timedelta(seconds=90), tick=False):
        request_id = PendingApproval.objects.get().request_id
        pending_approval_resolve(resolver=carol, decision="approve", request_id=request_id)
    assert PendingApproval.objects.get().status == ApprovalStatus.APPROVED

    resolved = scrape(client)
    assert resolved['skald_gate_decisions_total{action="require"}'] >= 1
    assert resolved["skald_approvals_pending"] == 0
    assert resolved["skald_approval_wait_seconds_count"] == 1
    assert resolved["skald_approval_wait_seconds_sum"] == pytest.approx(90, abs=1)
    assert resolved['skald_approval_wait_seconds_bucket{le="60.0"}'] == 0
    assert resolved['skald_approval_wait_seconds_bucket{le="120.0"}'] == 1
    assert resolved['skald_approval_wait_seconds_bucket{le="+Inf"}'] == 1


def test_the_exposition_never_carries_raw_arguments(client, alice, troubleshooting, script):
    script(tool_turn(WRITE), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")
    body = client.get("/metrics").content.decode()
    assert re.search(r"^skald_gate_decisions_total\{action=\"require\"\} [1-9]", body, re.MULTILINE)
    assert "pool exhausted" not in body and "findings.md" not in body
