"""The GDL launch (SPEC W1, W3, W5) and the human seams (W4), through the real routes."""

from __future__ import annotations

import json
import socket

import pytest
from django.contrib.auth.models import Group

from approvals.models import PendingApproval
from approvals.rules.seed import default_rules_ensure, demo_rules_ensure
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.errors import ProviderError
from loop.models import Exchange, ToolCall
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from skald.agents.seed import seed_agents
from skald.cases.services import case_create
from skald.loop_adapters import runtime
from skald.models import Run, RunStatus
from skald.sessions.workspace import read_current
from tests.conftest import make_user

# Not db_sensitive: a feature flow through the ORM paths that tests/loop (store, driver, recovery) and
# the race tests already run on PostgreSQL; it issues no SQL, lock or race of its own.
pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def world(settings, tmp_path):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "ws"
    seed_agents()
    default_rules_ensure()
    return case_create(actor=Actor.system("test"), title="502s", logs=[("app.log", "FATAL pool exhausted")])


@pytest.fixture
def provider():
    """A spy provider: records every request; the default script answers at once."""
    box = {"provider": LoopbackProvider([text_turn("diagnosis: pool exhausted")])}
    runtime.set_provider_factory(lambda agent: box["provider"])
    yield box
    runtime.set_provider_factory(None)


def launch(api, user, case, body=None, key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api(user).post(f"/workflow/cases/{case.pk}/gdl", body if body is not None else {"ticket": "502s"},
                          format="json", **headers)


def test_a_launch_that_ends_answers_200_with_the_run_and_receipt(alice, api, world, provider):
    response = launch(api, alice, world)
    assert response.status_code == 200, response.content
    run = response.json()
    assert run["status"] == "completed" and run["outcome"] == "completed"
    assert run["receipt"]["outcome"] == "completed"
    assert Run.objects.get().ticket == "502s"


def test_the_same_key_after_success_returns_the_same_run_and_does_no_new_work(alice, api, world, provider):
    first = launch(api, alice, world, key="k-1").json()
    again = launch(api, alice, world, key="k-1")
    assert again.status_code == 200
    assert again.json()["id"] == first["id"] and again.json()["receipt"] == first["receipt"]
    assert len(provider["provider"].calls) == 1 and Run.objects.count() == 1


def test_no_key_means_a_new_run_each_time(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([text_turn("a")], repeat_last=True)
    assert launch(api, alice, world).json()["id"] != launch(api, alice, world).json()["id"]


def test_a_provider_failure_is_503_then_409_without_replaying(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([ProviderError("upstream 500", code="provider_http_status")])
    first = launch(api, alice, world, key="k-f")
    assert first.status_code == 503 and first.json()["code"] == "gdl_provider_failed"
    again = launch(api, alice, world, key="k-f")
    assert again.status_code == 409 and again.json()["code"] == "gdl_run_terminal"
    assert len(provider["provider"].calls) == 1


def test_a_parked_launch_answers_202_with_a_location(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([tool_turn(("write_file", {"path": "r.md", "content": "x"}))])
    response = launch(api, alice, world)
    assert response.status_code == 202
    assert response["Location"] == f"/api/runs/{response.json()['id']}/"
    assert response.json()["status"] == "awaiting_human"


@pytest.mark.parametrize("field", ["provider", "model", "base_url", "api_key", "secret", "temperature",
                                   "provider_url"])
def test_caller_chosen_provider_fields_are_migrated(alice, api, world, provider, field):
    response = launch(api, alice, world, {"ticket": "x", field: "y"})
    assert response.status_code == 400 and response.json()["code"] == "gdl_request_migrated"
    assert not Run.objects.exists()


def test_a_ticket_carrying_a_credential_is_refused_audited_and_not_stored(alice, api, world, provider):
    secret = "glpat-" + "Zx81QpL0mN4vB7cR2tY9"

    response = launch(api, alice, world, {"ticket": f"deploy fails with token {secret}"})

    assert response.status_code == 400 and response.json()["code"] == "credential_tripwire"
    assert response.json()["extra"]["kinds"] == ["gitlab-pat"] and secret not in response.content.decode()
    assert not Run.objects.exists() and not Exchange.objects.exists()
    (refusal,) = AuditEvent.objects.filter(kind=AuditKind.TRIPWIRE_REFUSED)
    assert json.loads(refusal.payload)["where"] == "gdl_ticket" and secret not in refusal.payload


@pytest.mark.parametrize("ticket", ["", "   \n ", "é" * 4097, None, 42])
def test_a_bad_ticket_is_refused(alice, api, world, provider, ticket):
    response = launch(api, alice, world, {"ticket": ticket})
    assert response.status_code == 400 and response.json()["code"] == "gdl_ticket_invalid"


def test_a_ticket_of_exactly_8192_bytes_after_trimming_is_accepted(alice, api, world, provider):
    assert launch(api, alice, world, {"ticket": "  " + "a" * 8192 + "\n"}).status_code == 200


def test_an_unknown_case_is_404(alice, api, world, provider):
    response = api(alice).post("/workflow/cases/999999/gdl", {"ticket": "x"}, format="json")
    assert response.status_code == 404 and response.json()["code"] == "case_not_found"


@pytest.fixture
def refused_callers(db):
    roleless = make_user("roleless")
    unknown_role = make_user("wizard")
    unknown_role.groups.add(Group.objects.create(name="superhero"))
    agent = make_user("agent@loopback", "workflow", "operator")
    operator_only = make_user("olga", "operator")
    return {"roleless": roleless, "unknown role": unknown_role, "agent@loopback": agent,
            "no workflow role": operator_only}


def test_refused_callers_cause_no_provider_request_and_no_name_resolution(api, world, provider, refused_callers,
                                                                          monkeypatch):
    looked_up: list = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: looked_up.append(a) or [])
    for name, user in refused_callers.items():
        response = launch(api, user, world, {"ticket": "x", "provider": "evil"})
        assert response.status_code == 403, name
        assert response.json()["code"] == "permission_denied"
    assert launch(api, None, world).status_code == 401
    assert provider["provider"].calls == [] and looked_up == [] and not Run.objects.exists()


def test_handoff_continue_resumes_the_run_with_the_note(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([tool_turn(("ask_human", {"question": "Restart the DB?"})),
                                             text_turn("restarting as advised")])
    run = launch(api, alice, world).json()
    assert run["status"] == "handoff" and run["handoff_question"] == "Restart the DB?"
    response = api(alice).post(f"/workflow/runs/{run['id']}/handoff/decision",
                               {"decision": "continue", "note": "yes, the replica"}, format="json")
    assert response.status_code == 202
    assert Run.objects.get().status == RunStatus.COMPLETED
    assert provider["provider"].calls[-1].messages[-1].content == "A human answered: yes, the replica"
    again = api(alice).post(f"/workflow/runs/{run['id']}/handoff/decision", {"decision": "continue"},
                            format="json")
    assert again.status_code == 409 and again.json()["code"] == "run_state_conflict"


def test_handoff_close_ends_the_run_as_closed_by_a_human(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([tool_turn(("ask_human", {"question": "?"}))])
    run = launch(api, alice, world).json()
    api(alice).post(f"/workflow/runs/{run['id']}/handoff/decision", {"decision": "close", "note": "dup"},
                    format="json")
    closed = Run.objects.get()
    assert (closed.status, closed.closed_by_human, closed.outcome) == (RunStatus.COMPLETED, True, "closed_by_human")
    assert len(provider["provider"].calls) == 1


def test_back_referral_resumes_a_completed_run_on_the_same_session(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([text_turn("done"), text_turn("rechecked")])
    run = launch(api, alice, world).json()
    response = api(alice).post(f"/workflow/runs/{run['id']}/back-referral/return", {"note": "check the replica"},
                               format="json")
    assert response.status_code == 202
    refreshed = Run.objects.get()
    assert refreshed.status == RunStatus.COMPLETED and refreshed.session_id == run["session"]
    assert Exchange.objects.filter(session_id=run["session"]).count() == 2
    assert "check the replica" in provider["provider"].calls[-1].messages[-1].content


def test_back_referral_of_a_running_or_parked_run_is_a_conflict(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([tool_turn(("write_file", {"path": "r.md", "content": "x"}))])
    run = launch(api, alice, world).json()
    response = api(alice).post(f"/workflow/runs/{run['id']}/back-referral/return", {"note": "n"}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "run_state_conflict"


def test_the_demo_playbook_parks_on_the_write_completes_after_approval_and_leaves_a_proposal(
    alice, carol, api, world, settings
):
    runtime.set_provider_factory(None)  # the embedded default: the deterministic playbook
    demo_rules_ensure()  # as `make run` seeds it: delegating to the read-only log analyst needs no human
    run = launch(api, alice, world, {"ticket": "Checkout returns 502 after deploy"}).json()
    assert run["status"] == "awaiting_human"
    approval = PendingApproval.objects.get()
    assert approval.tool == "write_file" and approval.preview.startswith("new file: reports/findings.md")
    response = api(carol).post(f"/api/tools/{approval.tool_call_id}/resolve", {"decision": "approve"},
                               format="json")
    assert response.status_code == 202
    done = Run.objects.get()
    assert done.status == RunStatus.COMPLETED, done.status
    assert read_current(done.session_id, "reports/findings.md") is not None
    # The log analysis ran in the log analyst's child frame, in the same session (SPEC S1).
    assert ToolCall.objects.filter(session_id=done.session_id, tool="read_logs", status="completed",
                                   frame__depth=1).exists()
    from proposals.models import Proposal

    assert Proposal.objects.filter(run=done, status="pending").count() == 1


@pytest.mark.slow
def test_the_demo_playbook_compacting_at_every_turn_still_follows_its_playbook_to_the_end(
    alice, carol, api, world, settings
):  # ``world`` seeds the agents and rules
    """Compaction (SPEC L14) with tiny thresholds through the demo: the root and the log analyst's
    child frame each compact their own narrative, the playbook still takes its steps in order
    across the park and the resume, and replay-verify (with the audit cross-check) is clean."""
    settings.SKALD_COMPACTION = {"threshold_tokens": 40, "keep_tokens": 30, "summary_max_tokens": 200}
    runtime.set_provider_factory(None)
    demo_rules_ensure()
    logs = "\n".join(f"2026-11-30T09:12:{n:02d}Z ERROR pool: could not connect to db-primary:5432 (worker {n})"
                     for n in range(12))
    case = case_create(actor=Actor.system("test"), title="502s with logs", logs=[("app.log", logs)])
    run = launch(api, alice, case, {"ticket": "Checkout returns 502 since the 09:10 deploy; TimeoutError in "
                                               "/srv/checkout/pool.py, ticket OPS-4412."}).json()
    assert run["status"] == "awaiting_human"
    approval = PendingApproval.objects.get()
    assert approval.tool == "write_file"
    assert api(carol).post(f"/api/tools/{approval.tool_call_id}/resolve", {"decision": "approve"},
                           format="json").status_code == 202
    done = Run.objects.get()
    assert done.status == RunStatus.COMPLETED, done.status
    from loop.models import SessionEvent

    compacted = set(SessionEvent.objects.filter(session_id=done.session_id, kind="compaction")
                    .values_list("narrative", flat=True))
    assert "" in compacted and any(n.startswith("child:log-analyst:") for n in compacted)
    answer = SessionEvent.objects.filter(session_id=done.session_id, kind="assistant", narrative="").last()
    assert "Playbook complete" not in answer.payload["content"], "no step was skipped"
    assert read_current(done.session_id, "reports/findings.md") is not None
    from skald.crosscheck import replay_verify_session

    report = replay_verify_session(session_id=done.session_id)
    assert report.ok, report.mismatches


def test_the_wait_is_bounded_and_a_run_still_queued_at_the_deadline_answers_202(alice, api, world, provider,
                                                                                 settings):
    from django_q.models import OrmQ

    settings.SKALD_SYNC_TASKS = False  # no worker runs: only the deadline can end the wait
    settings.SKALD_GDL_WAIT_SECONDS = 1
    response = launch(api, alice, world)
    assert response.status_code == 202 and response.json()["status"] == "queued"
    assert OrmQ.objects.count() == 1  # the run waits on the broker, not on the request
    from skald.tasks import run_kernel_turn

    run_kernel_turn(Exchange.objects.get().pk)  # a worker picks it up later
    assert Run.objects.get().status == RunStatus.COMPLETED


def test_an_operator_stops_a_parked_run_and_its_approval_is_cancelled(alice, api, world, provider):
    provider["provider"] = LoopbackProvider([tool_turn(("write_file", {"path": "r.md", "content": "x"}))])
    run = launch(api, alice, world).json()
    response = api(alice).post(f"/api/runs/{run['id']}/stop/")
    assert response.status_code == 202 and response.json()["status"] == "canceled"
    assert PendingApproval.objects.get().status == "cancelled"
    events = api(alice).get(f"/api/runs/{run['id']}/events/?after=0").json()["results"]
    assert events[-1]["kind"] == "control:exchange_settled" and events[-1]["payload"] == {"outcome": "canceled"}


@pytest.mark.db_sensitive  # a cancelled view's query finishing in its thread, on its own connection
def test_a_client_that_goes_away_ends_the_wait_and_never_the_run(alice, world, provider, settings, monkeypatch):
    """Through the real ASGI handler: the client disconnects while the launch waits."""
    import asyncio
    import json as jsonlib
    import threading

    from asgiref.sync import sync_to_async
    from django.db import connections
    from rest_framework_simplejwt.tokens import RefreshToken

    from skald.asgi import application
    from skald.workflow import views

    # Barriers, not sleeps: the client leaves once the view polls the run's status (it is waiting),
    # and the test goes on once no status query is still running in its thread.
    polling, idle = threading.Event(), threading.Condition()
    in_flight = [0]
    run_status = views._run_status

    def counted_run_status(run_id: int) -> str:
        with idle:
            in_flight[0] += 1
        try:
            return run_status(run_id)
        finally:
            with idle:
                in_flight[0] -= 1
                idle.notify_all()
            polling.set()

    monkeypatch.setattr(views, "_run_status", counted_run_status)
    settings.SKALD_SYNC_TASKS = False  # no worker: the launch would wait its full 25 s
    token = str(RefreshToken.for_user(alice).access_token)
    body = jsonlib.dumps({"ticket": "502s"}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": f"/workflow/cases/{world.pk}/gdl", "raw_path": b"", "query_string": b"",
             "root_path": "", "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                                          (b"content-length", str(len(body)).encode()),
                                          (b"authorization", f"Bearer {token}".encode())],
             "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
    sent: list[dict] = []

    async def scenario() -> None:
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict:
            if messages:
                return messages.pop(0)
            assert await asyncio.to_thread(polling.wait, 30), "the view never started waiting"
            return {"type": "http.disconnect"}  # the client goes away while the view waits

        async def send(message: dict) -> None:
            sent.append(message)

        # A hang guard only: a view that ignored the disconnect would answer after its full wait,
        # and the assertion below would see that answer.
        await asyncio.wait_for(application(scope, receive, send), timeout=60)
        # A cancelled view's last query may still be finishing in its thread: wait until none runs.
        with idle:
            assert idle.wait_for(lambda: in_flight[0] == 0, timeout=30)
        await sync_to_async(connections.close_all)()  # the handler's thread keeps a connection

    asyncio.run(scenario())
    assert not any(message["type"] == "http.response.start" for message in sent)  # nobody left to answer
    run = Run.objects.get()
    assert run.status == RunStatus.QUEUED  # the run is untouched: it waits for a worker
    from skald.tasks import run_kernel_turn

    run_kernel_turn(Exchange.objects.get().pk)
    assert Run.objects.get().status == RunStatus.COMPLETED
