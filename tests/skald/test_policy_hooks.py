"""Hooks wired into Skald: a deny refuses loudly with one coarse audit row (SPEC L13)."""

from __future__ import annotations

import json

import pytest

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.driver import admit_exchange
from loop.errors import HookError
from loop.hooks import Allow, Deny, HookPoint
from loop.models import Exchange
from skald.agents.seed import seed_agents
from skald.loop_adapters.hooks import audited_hooks
from skald.loop_adapters.runtime import build_env
from skald.sessions.services import session_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def session(alice):
    seed_agents()
    return session_create(user=alice, agent="troubleshooter")


def test_a_before_start_deny_refuses_admission_with_one_audit_row(session):
    hooks = audited_hooks({HookPoint.BEFORE_START: [lambda ctx: Deny("tickets about payroll need HR " + "x" * 300)]})
    with pytest.raises(HookError):
        admit_exchange(build_env(session, hooks=hooks), request_key="k", content="payroll")
    assert not Exchange.objects.exists()
    rows = AuditEvent.objects.filter(kind=AuditKind.HOOK_DENIED)
    assert rows.count() == 1
    payload = json.loads(rows.get().payload)
    assert payload["point"] == "loop.before_start" and len(payload["reason"]) <= 160
    assert "payroll" not in payload.get("content", "")


def test_a_failing_hook_is_contained_neither_a_deny_nor_a_bypass(session):
    def broken(ctx):
        raise RuntimeError("bug")

    hooks = audited_hooks({HookPoint.BEFORE_START: [broken, lambda ctx: Allow()]})
    exchange, replayed = admit_exchange(build_env(session, hooks=hooks), request_key="k", content="hi")
    assert not replayed and exchange.pk
    assert hooks.error_count == 1
    assert not AuditEvent.objects.filter(kind=AuditKind.HOOK_DENIED).exists()
    counted = json.loads(AuditEvent.objects.get(kind=AuditKind.HOOK_ERROR).payload)
    assert (counted["point"], counted["errors"]) == ("loop.before_start", 1)
    denying = audited_hooks({HookPoint.BEFORE_START: [broken, lambda ctx: Deny("no")]})
    with pytest.raises(HookError):
        admit_exchange(build_env(session, hooks=denying), request_key="k2", content="hi")
