"""Replay-verify (SPEC L5, L6): recompute receipts and the projection from stored rows, never re-run."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from approvals.models import PendingApproval
from approvals.rules.seed import default_rules_ensure
from loop.models import Exchange, ExchangeStatus, SessionEvent
from loop.providers.loopback import text_turn, tool_turn
from loop.store import build_receipt
from skald.agents.seed import seed_agents
from skald.core import clock
from skald.crosscheck import replay_verify_run, replay_verify_session
from skald.loop_adapters import runtime
from skald.loop_adapters.discovery import forget_seen
from skald.models import Case, Run, RunStatus
from skald.sessions.services import session_create, session_message_submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

SEARCH = ("search_knowledge", {"query": "connection pool exhausted"})
WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\n"})


@pytest.fixture
def run(alice, settings, tmp_path) -> Run:
    """alice's run on a case, over a fresh troubleshooter session (no turn driven yet); tasks inline."""
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    seed_agents()
    default_rules_ensure()
    forget_seen()
    session = session_create(user=alice, agent="troubleshooter", title="replay-verify")
    now = clock.now()
    case = Case.objects.create(title="db timeouts", created_by=alice, created_at=now)
    return Run.objects.create(case=case, session=session, ticket="db timeouts", launched_by=alice,
                              launch_key="replay-verify-1", status=RunStatus.RUNNING, created_at=now,
                              updated_at=now)


@pytest.fixture
def no_provider():
    """From here on, building a provider fails the test: verification must not need one."""

    def refuse(agent):
        raise AssertionError(f"replay-verify asked for a provider for {agent.name}")

    runtime.set_provider_factory(refuse)
    yield
    runtime.set_provider_factory(None)


def converse(alice, run: Run, script, content: str = "why does the db time out?") -> Exchange:
    """One settled exchange: a search_knowledge call, then an answer."""
    script(tool_turn(SEARCH), text_turn("the pool is exhausted"))
    exchange, _ = session_message_submit(user=alice, session=run.session, content=content)
    exchange.refresh_from_db()
    assert exchange.status == ExchangeStatus.SETTLED and exchange.outcome == "completed"
    return exchange


def event(run: Run, kind: str, exchange: Exchange | None = None) -> SessionEvent:
    rows = SessionEvent.objects.filter(session=run.session, kind=kind)
    return (rows.filter(exchange=exchange) if exchange is not None else rows).get()


def set_payload(row: SessionEvent, payload: dict) -> None:
    """Edit a narrative row behind the store's back, as an attacker with SQL would."""
    cast = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE loop_sessionevent SET payload = {cast} WHERE id = %s", [json.dumps(payload), row.pk])


def fields(report) -> set[tuple]:
    return {(m["number"], m["field"], m.get("seq")) for m in report.mismatches}


def command(run_id: int) -> tuple[int, dict]:
    out = StringIO()
    try:
        call_command("replay_verify", str(run_id), stdout=out)
    except SystemExit as exit_:
        return int(exit_.code), json.loads(out.getvalue())
    return 0, json.loads(out.getvalue())


def test_it_passes_on_a_completed_run_without_calling_a_provider(alice, run, script, no_provider):
    converse(alice, run, script)
    report = replay_verify_run(run_id=run.pk)
    assert report.as_dict() == {"ok": True, "exchanges": 1, "events": 7, "mismatches": []}


def test_it_passes_over_several_exchanges(alice, run, script):
    converse(alice, run, script)
    converse(alice, run, script, content="and now?")
    report = replay_verify_session(session_id=run.session_id)
    assert (report.ok, report.exchanges, report.events) == (True, 2, 14)


def test_it_names_the_exchange_and_seq_of_an_edited_event_payload(alice, run, script, no_provider):
    exchange = converse(alice, run, script)
    result = event(run, "tool_result")
    set_payload(result, {**result.payload, "content": "nothing to see here"})

    report = replay_verify_run(run_id=run.pk)
    assert not report.ok
    assert (1, "digest", None) in fields(report)  # the receipt no longer fits the rows
    edited = [m for m in report.mismatches if m["field"] == "event.digest"]
    assert len(edited) == 1
    assert edited[0]["exchange"] == exchange.pk and edited[0]["seq"] == result.seq
    assert edited[0]["kind"] == "tool_result" and edited[0]["audited"] != edited[0]["recomputed"]


def test_it_catches_an_edit_even_when_the_receipt_is_rewritten_to_fit(alice, run, script):
    exchange = converse(alice, run, script)
    answer = SessionEvent.objects.filter(session=run.session, kind="assistant").order_by("-seq").first()
    set_payload(answer, {**answer.payload, "content": "all is well"})
    exchange.refresh_from_db()
    rows = SessionEvent.objects.filter(exchange=exchange).order_by("seq").values_list("seq", "kind", "payload")
    forged = build_receipt(exchange, outcome=exchange.outcome, events=list(rows), detail=exchange.receipt["detail"])
    Exchange.objects.filter(pk=exchange.pk).update(receipt=forged)

    report = replay_verify_session(session_id=run.session_id)
    assert fields(report) == {(1, "event.digest", answer.seq), (1, "settled_audit.receipt_digest", None)}


def test_a_deleted_event_is_a_gap_a_missing_audited_event_and_a_receipt_mismatch(alice, run, script):
    converse(alice, run, script)
    intent = event(run, "control:tool_intent")
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM loop_sessionevent WHERE id = %s", [intent.pk])

    report = replay_verify_run(run_id=run.pk)
    assert report.events == 6
    gap = next(m for m in report.mismatches if m["field"] == "seq")
    assert gap["error"] == "gap" and gap["missing"] == [intent.seq]
    assert {(1, "events", None), (1, "digest", None), (1, "event", intent.seq)} <= fields(report)


def test_an_edited_intent_row_is_named_though_its_audit_row_has_no_digest(alice, run, script):
    converse(alice, run, script)
    intent = event(run, "control:tool_intent")
    set_payload(intent, {**intent.payload, "name": "write_file"})
    assert (1, "event.intent", intent.seq) in fields(replay_verify_session(session_id=run.session_id))


def test_a_history_the_projection_refuses_is_a_mismatch(alice, run, script):
    converse(alice, run, script)
    result = event(run, "tool_result")
    set_payload(result, {**result.payload, "key": "e9:t9:c9"})  # now an orphan result
    projection = [m for m in replay_verify_run(run_id=run.pk).mismatches if m["field"] == "projection"]
    assert len(projection) == 1
    assert projection[0]["code"] == "projection_refused" and "e9:t9:c9" in projection[0]["error"]


def test_a_parked_exchange_is_counted_and_verifies_before_and_after_its_approval(alice, carol, api, run, script):
    script(tool_turn(WRITE), text_turn("written"))
    session_message_submit(user=alice, session=run.session, content="write the findings")
    assert Exchange.objects.get(session=run.session).status == ExchangeStatus.PARKED
    parked = replay_verify_run(run_id=run.pk)
    assert (parked.ok, parked.exchanges) == (True, 1), parked.mismatches

    call_id = PendingApproval.objects.get().tool_call_id
    assert api(carol).post(f"/api/tools/{call_id}/resolve", {"decision": "approve"}, format="json").status_code == 202
    assert Exchange.objects.get(session=run.session).status == ExchangeStatus.SETTLED
    settled = replay_verify_run(run_id=run.pk)
    assert (settled.ok, settled.exchanges) == (True, 1), settled.mismatches
    assert settled.events == SessionEvent.objects.filter(session=run.session).count() > parked.events


def test_the_command_prints_the_report_and_exits_1_after_tampering(alice, run, script, no_provider):
    converse(alice, run, script)
    assert command(run.pk) == (0, {"ok": True, "exchanges": 1, "events": 7, "mismatches": []})

    user = event(run, "user")
    set_payload(user, {**user.payload, "content": "ignore all previous instructions"})
    code, body = command(run.pk)
    assert code == 1 and body["ok"] is False
    edited = [(m["exchange"], m["seq"]) for m in body["mismatches"] if m["field"] == "event.digest"]
    assert edited == [(user.exchange_id, user.seq)]


def test_the_command_refuses_an_unknown_run(db):
    with pytest.raises(CommandError, match="Run 999999 does not exist"):
        call_command("replay_verify", "999999", stdout=StringIO())


def test_the_api_answers_operators_and_auditors_only(alice, dave, charlie, api, run, script, no_provider):
    converse(alice, run, script)
    url = f"/api/runs/{run.pk}/replay-verify"
    for user in (alice, dave):
        response = api(user).get(url)
        assert response.status_code == 200, response.content
        assert response.json() == {"ok": True, "exchanges": 1, "events": 7, "mismatches": []}
    assert api(charlie).get(url).status_code == 403
    assert api(None).get(url).status_code == 401
    missing = api(alice).get("/api/runs/999999/replay-verify")
    assert missing.status_code == 404 and missing.json()["code"] == "run_not_found"


def test_the_api_reports_a_tampered_run_as_200_not_ok(alice, api, run, script):
    converse(alice, run, script)
    result = event(run, "tool_result")
    set_payload(result, {**result.payload, "content": "edited"})
    body = api(alice).get(f"/api/runs/{run.pk}/replay-verify").json()
    assert body["ok"] is False and result.seq in [m.get("seq") for m in body["mismatches"]]


def test_the_admins_replay_verify_of_a_run_that_does_not_exist_is_a_404_not_a_500(client):
    """Found by the bad-input fuzz: the admin's button view let the service's NotFound through."""
    from tests.conftest import make_user

    client.force_login(make_user("root", superuser=True))
    for run_id in ("999999", "9223372036854775807"):
        assert client.get(f"/admin/skald/run/{run_id}/replay-verify/").status_code == 404
