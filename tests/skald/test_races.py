"""Create-or-return paths under 20-way concurrency (issue 11 §3): one winner, and every loser gets
the answer a sequential retry gets, never a 500. Threads released together by a barrier, each
with its own database connection (real PostgreSQL row locks in the PostgreSQL pass)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import RefreshToken

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import Exchange, ExchangeStatus
from skald.agents.seed import seed_agents
from skald.cases.services import case_create
from skald.models import Run, RunStatus
from skald.sessions import services
from tests.race import race

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

N = 20


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {RefreshToken.for_user(user).access_token}")
    return client


# A 503 that says "retry after" is backpressure, not an answer about the race: 20 racers share a
# pool of 10 connections, and on a loaded machine a racer can wait past the pool's timeout.
RETRY_CODES = {"db_pool_exhausted", "server_busy", "database_unavailable"}


def answer(send: Callable[[], Any]) -> tuple[int, Any]:
    """The status and body ``send()`` gets once it is served: retried on a 503 with Retry-After, as a
    client does."""
    for _ in range(20):
        response = send()
        if response.status_code != 503 or response.json().get("code") not in RETRY_CODES:
            break
        assert response.headers.get("Retry-After"), response.json()
    return response.status_code, response.json()


@pytest.fixture
def world(settings: Any) -> Any:
    settings.SKALD_GDL_WAIT_SECONDS = 0  # answer at once: the run is queued (no worker here)
    seed_agents()
    return case_create(actor=Actor.system("test"), title="502s", logs=[])


def test_20_launches_with_one_key_make_one_run_and_answer_alike(alice, world):
    clients = [client_for(alice) for _ in range(N)]

    def launch(i: int) -> tuple[int, Any]:
        return answer(lambda: clients[i].post(f"/workflow/cases/{world.pk}/gdl", {"ticket": "502s"}, format="json",
                                      HTTP_IDEMPOTENCY_KEY="same-key"))

    answers = race(N, launch)
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    run = Run.objects.get()
    retry = launch(0)  # what a sequential retry answers
    assert retry[0] in (200, 202) and retry[1]["id"] == run.pk
    assert {(status, body["id"]) for status, body in answers} == {(retry[0], run.pk)}
    assert AuditEvent.objects.filter(kind=AuditKind.RUN_LAUNCHED).count() == 1
    assert Exchange.objects.filter(session=run.session).count() == 1


def test_20_messages_with_one_key_admit_one_exchange_and_answer_alike(alice):
    seed_agents()
    session = services.session_create(user=alice, title="t")
    clients = [client_for(alice) for _ in range(N)]

    def send(i: int) -> tuple[int, Any]:
        return answer(lambda: clients[i].post(f"/api/sessions/{session.pk}/messages/", {"content": "investigate"},
                                      format="json", HTTP_IDEMPOTENCY_KEY="k-1"))

    answers = race(N, send)
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    exchange = Exchange.objects.get(session=session)
    assert {(status, body["id"]) for status, body in answers} == {(202, exchange.pk)}
    assert send(0)[1]["id"] == exchange.pk
    assert AuditEvent.objects.filter(kind=AuditKind.EXCHANGE_ADMITTED).count() == 1


def test_20_messages_with_different_keys_admit_one_and_refuse_the_rest_with_409(alice):
    seed_agents()
    session = services.session_create(user=alice, title="t")
    clients = [client_for(alice) for _ in range(N)]
    answers = race(N, lambda i: answer(lambda: clients[i].post(f"/api/sessions/{session.pk}/messages/",
                                                               {"content": "go"}, format="json",
                                                               HTTP_IDEMPOTENCY_KEY=f"k-{i}")))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [202] + [409] * (N - 1), answers
    assert {body["code"] for status, body in answers if status == 409} == {"session_busy"}
    assert Exchange.objects.filter(session=session).count() == 1


def test_20_stops_of_one_exchange_request_one_cancel(alice):
    seed_agents()
    session = services.session_create(user=alice, title="t")
    exchange, _ = services.session_message_submit(user=alice, session=session, content="go")
    clients = [client_for(alice) for _ in range(N)]
    answers = race(N, lambda i: answer(lambda: clients[i].post(f"/api/sessions/{session.pk}/stop/", {}, format="json")))
    assert {status for status, _ in answers} <= {200, 202}, answers
    assert Exchange.objects.get(pk=exchange.pk).cancel_requested_at is not None


def test_20_back_referrals_of_one_run_resume_it_once(alice, world):
    run, _ = __import__("skald.cases.runs", fromlist=["run_launch"]).run_launch(
        user=alice, case_id=world.pk, ticket="502s", launch_key="k")
    Exchange.objects.filter(session=run.session).update(status=ExchangeStatus.SETTLED)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    clients = [client_for(alice) for _ in range(N)]
    answers = race(N, lambda i: answer(lambda: clients[i].post(f"/workflow/runs/{run.pk}/back-referral/return",
                                                       {"note": "again"}, format="json")))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [202] + [409] * (N - 1), answers
    assert Exchange.objects.filter(session=run.session).count() == 2


@pytest.mark.parametrize("same_content", [True, False])
def test_20_writes_of_one_new_workspace_file_make_one_row_and_a_version_each(alice, same_content):
    from skald.models import WorkspaceFile
    from skald.sessions.workspace import workspace_read, workspace_write

    seed_agents()
    session = services.session_create(user=alice, title="t")
    written = race(N, lambda i: workspace_write(session_id=session.pk, path="reports/a.md",
                                                data=b"same" if same_content else f"v{i}".encode(),
                                                actor=Actor.user(alice)))
    assert not [w for w in written if isinstance(w, BaseException)], written
    row = WorkspaceFile.objects.get(session=session, path="reports/a.md")
    audited = AuditEvent.objects.filter(kind=AuditKind.WORKSPACE_FILE_WRITTEN).count()
    if same_content:
        assert (row.version, audited, workspace_read(session_id=session.pk, path="reports/a.md")) == (1, 1, "same")
    else:  # serialised like sequential writes: versions 1..20, each audited once
        assert (row.version, audited) == (N, N)
