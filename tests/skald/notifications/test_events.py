"""The other human seams and alarms reach a receiver (issue 31): a handoff, a failed run, a
proposal to review, a broken audit chain; each once, with the page to act on."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
import time_machine

from approvals.rules.seed import default_rules_ensure
from audit.actors import Actor
from audit.models import AuditEvent
from loop.errors import ProviderError
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from skald.agents.seed import seed_agents
from skald.cases.services import case_create
from skald.core import clock
from skald.loop_adapters import runtime
from skald.models import Run
from skald.notifications.events import EventKind
from skald.notifications.models import Delivery
from skald.notifications.services import subscription_create
from skald.tasks import sweep_notifications, watch_audit_chain
from tests.audit.forge import tamper
from tests.skald.notifications.conftest import approval_event

pytestmark = [pytest.mark.django_db(transaction=True)]
EVENTS = ["handoff.waiting", "run.failed", "run.stuck", "proposal.pending", "audit.chain_broken", "task.dead_lettered"]


@pytest.fixture
def case(settings, tmp_path, receiver):
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "ws"
    seed_agents()
    default_rules_ensure()
    receiver.secret = subscription_create(actor=Actor.system("test"), owner=None, data={
        "name": "ops", "channel": "webhook", "target": receiver.url, "events": EVENTS}).secret
    return case_create(actor=Actor.system("test"), title="502s", logs=[("app.log", "FATAL pool exhausted")])


def launch(api, user, case, *turns):
    runtime.set_provider_factory(lambda agent: LoopbackProvider(list(turns)))
    try:
        return api(user).post(f"/workflow/cases/{case.pk}/gdl", {"ticket": "502s"}, format="json")
    finally:
        runtime.set_provider_factory(None)


def test_a_handoff_is_announced_once_with_the_question_and_the_run_page(alice, api, case, receiver):
    launch(api, alice, case, tool_turn(("ask_human", {"question": "Restart the DB?"})))
    run = Run.objects.get()
    sweep_notifications()
    (got,) = receiver.accepted()
    assert got.payload["type"] == "handoff.waiting" and "Restart the DB?" in got.payload["summary"]
    assert got.payload["link"].endswith(f"/admin/skald/run/{run.pk}/change/")
    assert got.payload["requested_by"] == "alice" and got.payload["case"] == str(case.pk)


def test_a_failed_run_is_announced(alice, api, case, receiver):
    launch(api, alice, case, ProviderError("upstream 500", code="provider_http_status"))
    assert receiver.types() == ["run.failed"]


def test_a_run_that_records_nothing_for_a_while_is_announced_once_per_stall(alice, api, case, receiver, settings):
    settings.SKALD_SYNC_TASKS = False  # no worker drives it: the run stays queued
    settings.SKALD_GDL_WAIT_SECONDS = 0
    launch(api, alice, case, text_turn("never reached"))
    run = Run.objects.get()
    settings.SKALD_SYNC_TASKS = True
    start = clock.now()
    for minutes in (10, 31, 45):
        with time_machine.travel(start + timedelta(minutes=minutes), tick=False):
            sweep_notifications()
    assert receiver.types() == ["run.stuck"]
    assert receiver.accepted()[0].payload["link"].endswith(f"/admin/skald/run/{run.pk}/change/")


def test_a_captured_proposal_is_announced_for_review(alice, api, case, receiver):
    launch(api, alice, case, text_turn("diagnosis: pool exhausted"))
    assert receiver.types() == ["proposal.pending"]
    assert "/admin/proposals/proposal/" in receiver.accepted()[0].payload["link"]


def test_a_broken_audit_chain_is_announced_once(case, receiver):
    assert watch_audit_chain() == "ok"  # verified up to here: the next pass reads what follows
    subscription_create(actor=Actor.system("test"), owner=None, data={
        "name": "mail", "channel": "email", "target": "ops@example.org", "events": ["run.failed"]})
    latest = AuditEvent.objects.order_by("-seq").first()
    assert latest is not None
    tamper(latest.seq, "payload", '{"forged": true}')
    assert watch_audit_chain().startswith("broken")
    watch_audit_chain()
    assert receiver.types() == ["audit.chain_broken"]
    assert receiver.accepted()[0].payload["risk"] == "high"
    assert Delivery.objects.count() == 1


def test_a_dead_lettered_task_is_announced_to_its_owner_once(alice, receiver, case):
    from skald.jobs.models import JobRun, ScheduledJob
    from skald.jobs.services import DEAD_LETTER_AFTER, job_run_delivery_failed

    now = clock.now()
    job = ScheduledJob.objects.create(kind="cron", cron="0 3 * * *", status="scheduled", owner=alice,
                                      agent="log-analyst", task="nightly", created_at=now, updated_at=now)
    run = JobRun.objects.create(job=job, number=1, started_at=now)
    for _ in range(DEAD_LETTER_AFTER + 1):
        job_run_delivery_failed(run_id=run.pk, error="RuntimeError: the home cannot take it")
    assert receiver.types() == ["task.dead_lettered"]
    payload = receiver.accepted()[0].payload
    assert payload["link"].endswith(f"/admin/skald/jobrun/{run.pk}/change/") and payload["requested_by"] == "alice"


def test_a_person_with_a_subscription_of_their_own_gets_no_default_one(alice, receiver):
    """The default personal subscription is for people who never set one up: someone who chose what
    they hear (here: only failed runs) is not given another."""
    from skald.notifications.models import Subscription
    from skald.notifications.services import notification_record

    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    subscription_create(actor=Actor.system("test"), owner=alice, data={
        "name": "failures", "channel": "user_email", "target": "", "events": ["run.failed"]})
    expired = replace(approval_event(EventKind.APPROVAL_EXPIRED), audience=(alice.pk,))
    assert notification_record(event=expired) == []
    assert list(Subscription.objects.filter(owner=alice).values_list("name", flat=True)) == ["failures"]
