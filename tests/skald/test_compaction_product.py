"""Compaction through the product: the deterministic playbook provider writes the summaries, the
product's audited hooks guard the cycle, and /metrics counts what happened (SPEC L14, L13, O1)."""

from __future__ import annotations

import json

import pytest

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.hooks import Deny, HookPoint
from loop.models import SessionEvent
from skald.agents.seed import seed_agents
from skald.crosscheck import replay_verify_session
from skald.loop_adapters.hooks import audited_hooks
from skald.loop_adapters.runtime import build_env
from skald.models import Agent
from skald.sessions.services import session_create, session_message_submit

# Not db_sensitive: a feature flow through the ORM paths that tests/loop (store, driver, recovery) and
# the race tests already run on PostgreSQL; it issues no SQL, lock or race of its own.
pytestmark = [pytest.mark.django_db(transaction=True)]

TICKETS = [
    "checkout-api returns HTTP 503 since release 4.18.2; see /var/log/checkout/app.log",
    "TimeoutError in /srv/checkout/pool.py: db_pool exhausted after 30000 ms",
    "max_connections is 20 in /etc/checkout/db.conf; ticket OPS-4412",
    "ConnectionRefusedError to 10.2.0.7 port 5432 (errno 111) on host db-primary",
    "raised POOL_MAX to 60 and restarted checkout_api; trace 9f3c2a7b1d",
    "error rate back under 0.1 percent; build 4.18.3 deployed",
]


@pytest.fixture
def session(alice, settings, tmp_path):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    settings.SKALD_COMPACTION = {"threshold_tokens": 150, "keep_tokens": 100, "summary_max_tokens": 200}
    seed_agents()
    Agent.objects.filter(name="troubleshooter").update(
        playbook=[{"tool": "search_knowledge", "args": {"query": "{input}"}}, {"answer": "Noted: {input}"}])
    return session_create(user=alice, agent="troubleshooter")


def scrape(client) -> dict[str, float]:
    samples = {}
    for line in client.get("/metrics").content.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_the_playbook_provider_compacts_a_long_session_and_metrics_count_it(alice, session, client):
    for ticket in TICKETS:
        exchange, _ = session_message_submit(user=alice, session=session, content=ticket)
        exchange.refresh_from_db()
        assert exchange.outcome == "completed"
    rows = list(SessionEvent.objects.filter(session=session, kind="compaction").order_by("seq"))
    reports = [e.payload for e in SessionEvent.objects.filter(session=session, kind="control:compaction_probe")]
    assert rows and len(reports) == len(rows)
    assert rows[0].payload["summary"].startswith("Summary of the earlier conversation")
    assert AuditEvent.objects.filter(kind=AuditKind.COMPACTION_COMMITTED).count() == len(rows)
    assert AuditEvent.objects.filter(kind=AuditKind.COMPACTION_PROBED).count() == len(rows)
    report = replay_verify_session(session_id=session.pk)  # the audit rows name each compaction row by digest
    assert report.ok, report.mismatches

    samples = scrape(client)
    by_result = {r: samples[f'skald_compactions_total{{result="{r}"}}'] for r in ("ok", "no_signal", "degraded")}
    assert sum(by_result.values()) == len(rows)
    assert by_result["ok"] == sum(1 for r in reports if r["result"] == "ok")
    assert samples["skald_compaction_lost_permille_count"] == len(rows)
    assert samples["skald_compaction_lost_permille_sum"] == sum(r["lost_permille"] for r in reports)
    assert samples['skald_compaction_lost_permille_bucket{le="1000"}'] == len(rows)
    assert samples["skald_compaction_latches_total"] == sum(1 for r in reports if r["latched"])
    assert samples["skald_compaction_quota_stops_total"] == 0


def test_a_compaction_deny_is_audited_once_by_point_and_counted(alice, session, client):
    hooks = audited_hooks({HookPoint.BEFORE_COMPACTION: [lambda ctx: Deny("compaction frozen during the audit")]})
    from loop.driver import run_turns_keyed

    for number, ticket in enumerate(TICKETS[:4]):
        run_turns_keyed(build_env(session, hooks=hooks), request_key=f"k{number}", content=ticket)
    assert not SessionEvent.objects.filter(session=session, kind="compaction").exists()
    denies = [json.loads(p) for p in AuditEvent.objects.filter(kind=AuditKind.HOOK_DENIED)
              .values_list("payload", flat=True)]
    assert denies and all(d["point"] == "loop.before_compaction" for d in denies)
    # At most once per exchange: a deny holds for the rest of it, the next exchange asks again.
    assert len({d["exchange"] for d in denies}) == len(denies) >= 2
    samples = scrape(client)
    assert samples['skald_hook_denies_total{point="loop.before_compaction"}'] == len(denies)
    assert samples['skald_hook_denies_total{point="loop.before_start"}'] == 0
    assert samples['skald_hook_errors_total{point="loop.before_compaction"}'] == 0


def test_a_raising_compaction_hook_is_counted_by_point_and_never_blocks(alice, session, client):
    def broken(ctx):
        raise RuntimeError("the policy service is down")

    hooks = audited_hooks({HookPoint.BEFORE_COMPACTION: [broken]})
    from loop.driver import run_turns_keyed

    for number, ticket in enumerate(TICKETS[:4]):
        run_turns_keyed(build_env(session, hooks=hooks), request_key=f"k{number}", content=ticket)
    compactions = SessionEvent.objects.filter(session=session, kind="compaction").count()
    assert compactions >= 1, "a hook that raises is contained and counted, never a deny"
    errors = [json.loads(p) for p in AuditEvent.objects.filter(kind=AuditKind.HOOK_ERROR)
              .values_list("payload", flat=True)]
    assert errors and all(e["point"] == "loop.before_compaction" for e in errors)
    assert sum(int(e.get("errors", 1)) for e in errors) == compactions  # asked once per pending cycle
    samples = scrape(client)
    assert samples['skald_hook_errors_total{point="loop.before_compaction"}'] == compactions
    assert samples['skald_hook_denies_total{point="loop.before_compaction"}'] == 0
