"""Async tasks (SPEC S4): every ending — success, failure, cancellation — is classified once and
reaches the parent conversation exactly once, from the one delivery site; a redelivery is a no-op
and a busy parent defers it, never loses it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.driver import admit_exchange, run_turns_keyed
from loop.errors import ProviderError
from loop.models import Exchange, SessionEvent, ToolCall
from loop.outcomes import Canceled, Completed, ProviderFailed, TurnCapReached
from loop.providers.loopback import text_turn, tool_turn
from skald.core import clock
from skald.jobs.classify import classify
from skald.jobs.delivery import deliver_due, job_run_deliver
from skald.jobs.models import JobRun, RunEnding, ScheduledJob
from skald.jobs.runner import run_job
from skald.jobs.services import job_cancel, job_run_start
from skald.loop_adapters.runtime import build_env
from skald.sessions.services import session_stop
from skald.tasks import deliver_due_jobs, run_kernel_turn
from tests.skald.conftest import task_completed_calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

START = ("execute_task", {"agent": "log-analyst", "task": "look at the logs", "mode": "async"})


def delivered(conversation) -> list[ToolCall]:
    return task_completed_calls(conversation)


def task_updates(conversation) -> list[str]:
    return [f"{e.payload['status']}{'+delivered' if e.payload['delivered'] else ''}"
            for e in SessionEvent.objects.filter(session=conversation, kind="control:task_update").order_by("seq")]


def test_the_classification_is_typed_never_read_from_text():
    assert classify(Completed(answer="the job was cancelled by ops")).status == RunEnding.SUCCEEDED
    assert classify(Canceled(reason="stop requested")).status == RunEnding.CANCELLED
    assert classify(ProviderFailed(code="x", message="cancelled")).status == RunEnding.FAILED
    assert classify(TurnCapReached(turns=8)).status == RunEnding.FAILED


def test_an_async_success_reaches_the_parent_once_and_resumes_it(conversation, say, script, allow_all,
                                                                 inline_tasks):
    script(tool_turn(START),  # the parent starts the task ...
           text_turn("pool exhausted at 09:12"),  # ... the task agent answers on its worker
           text_turn("started it, will report"),  # the parent's turn ends
           text_turn("the task says: pool exhausted"))  # the parent resumes on the delivered result
    first = say("check logs in the background")
    assert "Started async task #" in ToolCall.objects.get(tool="execute_task").result
    job = ScheduledJob.objects.get()
    run = job.runs.get()
    assert (job.status, run.status) == ("succeeded", "succeeded") and run.delivered_at is not None

    (call,) = delivered(conversation)
    assert call.status == "completed" and "succeeded." in call.result and "pool exhausted at 09:12" in call.result
    resumed = Exchange.objects.get(pk=run.delivery_exchange_id)
    assert resumed.request_key == f"job:{job.pk}:run:1:delivery" and resumed.number == first.number + 1
    assert resumed.outcome == "completed" and resumed.receipt["detail"]["answer"] == "the task says: pool exhausted"
    assert task_updates(conversation) == ["queued", "running", "succeeded", "succeeded+delivered"]
    assert AuditEvent.objects.filter(kind=AuditKind.JOB_DELIVERED, subject_id=str(job.pk)).count() == 1

    # A redelivery (a retried queue message, the sweep) finds it delivered and writes nothing.
    events_before = SessionEvent.objects.filter(session=conversation).count()
    assert job_run_deliver(run_id=run.pk) == "delivered already"
    assert deliver_due() == []
    assert len(delivered(conversation)) == 1
    assert SessionEvent.objects.filter(session=conversation).count() == events_before


def test_an_async_failure_is_delivered_as_prose_with_its_partial_output(conversation, say, script, allow_all,
                                                                         inline_tasks):
    script(tool_turn(START),
           tool_turn(("search_knowledge", {"query": "pool"}), text="looking at knowledge first"),
           ProviderError("upstream 503", code="provider_http_503"),
           text_turn("started"), text_turn("the task failed; I will look myself"))
    say("check logs in the background")
    run = JobRun.objects.get()
    assert run.status == "failed" and run.outcome == "provider_failed"
    (call,) = delivered(conversation)
    assert "FAILED: the model provider failed (provider_http_503)" in call.result
    assert "Partial output:" in call.result and "looking at knowledge first" in call.result
    resumed = Exchange.objects.get(pk=run.delivery_exchange_id)
    assert resumed.outcome == "completed"  # the parent was not left waiting


def test_a_cancelled_task_is_recorded_cancelled_and_reaches_the_parent_once_without_a_model_turn(
        conversation, say, script, allow_all, settings, alice):
    settings.SKALD_SYNC_TASKS = False  # no worker picks the task up: it stays queued
    script(tool_turn(START), text_turn("started"))
    run_turns_keyed(build_env(conversation), request_key="k", content="start it")
    settings.SKALD_SYNC_TASKS = True
    job = ScheduledJob.objects.get()
    assert job.status == "queued"

    job_cancel(job_id=job.pk, principal=f"user:{alice.pk}")
    run = JobRun.objects.get()
    assert (run.status, run.outcome) == ("cancelled", "canceled") and run.delivered_at is not None
    (call,) = delivered(conversation)
    assert "was cancelled" in call.result
    resumed = Exchange.objects.get(pk=run.delivery_exchange_id)
    assert resumed.outcome == "canceled" and resumed.turns == 1  # the synthetic turn only: no model call
    assert job_run_deliver(run_id=run.pk) == "delivered already"
    assert len(delivered(conversation)) == 1


def test_a_stop_of_the_parent_cancels_the_tasks_it_started(conversation, say, script, allow_all, settings, alice):
    settings.SKALD_SYNC_TASKS = False
    script(tool_turn(START), text_turn("started"))
    run_turns_keyed(build_env(conversation), request_key="k", content="start it")
    settings.SKALD_SYNC_TASKS = True
    session_stop(user=alice, session=conversation)
    assert JobRun.objects.get().status == "cancelled"
    assert len(delivered(conversation)) == 1


def test_a_busy_parent_defers_the_delivery_until_its_exchange_ends(conversation, script, allow_all, settings):
    settings.SKALD_SYNC_TASKS = False  # the task waits in the queue while the parent talks on
    script(tool_turn(START), text_turn("started"), text_turn("pool exhausted"), text_turn("noted"),
           text_turn("thanks for the result"))
    env = build_env(conversation)
    run_turns_keyed(env, request_key="k", content="start it")
    blocker, _ = admit_exchange(env, request_key="busy", content="still talking")  # the parent is busy again
    settings.SKALD_SYNC_TASKS = True
    job = ScheduledJob.objects.get()
    assert run_job(job.pk) == "succeeded"
    run = JobRun.objects.get()
    assert run.status == "succeeded" and run.delivered_at is None  # deferred, not lost
    assert job_run_deliver(run_id=run.pk).startswith("deferred")
    assert delivered(conversation) == []

    run_kernel_turn(blocker.pk)  # the parent's exchange ends: its follow-up delivers what waited
    run.refresh_from_db()
    assert run.delivered_at is not None and len(delivered(conversation)) == 1
    assert Exchange.objects.get(pk=run.delivery_exchange_id).outcome == "completed"


def test_the_sweep_picks_up_what_a_lost_worker_or_queue_message_left(conversation, script, allow_all, settings):
    settings.SKALD_SYNC_TASKS = False  # the queue message is "lost": nothing runs it
    script(tool_turn(START), text_turn("started"), text_turn("found it late"), text_turn("noted"))
    run_turns_keyed(build_env(conversation), request_key="k", content="start it")
    job = ScheduledJob.objects.get()
    settings.SKALD_SYNC_TASKS = True
    assert deliver_due_jobs() == 0  # young: the queue may still be working through it
    with time_machine.travel(clock.now() + timedelta(minutes=6), tick=False):
        deliver_due_jobs()
    job.refresh_from_db()
    assert job.status == "succeeded" and len(delivered(conversation)) == 1


def test_a_run_whose_worker_died_before_it_began_ends_failed_and_is_delivered(conversation, script, allow_all,
                                                                              settings):
    settings.SKALD_SYNC_TASKS = False
    script(tool_turn(START), text_turn("started"), text_turn("noted the failure"))
    run_turns_keyed(build_env(conversation), request_key="k", content="start it")
    job = ScheduledJob.objects.get()
    run = job_run_start(job_id=job.pk)  # the worker started the run, then died
    settings.SKALD_SYNC_TASKS = True
    with time_machine.travel(clock.now() + timedelta(seconds=settings.SKALD_CLAIM_STALE_SECONDS + 1), tick=False):
        deliver_due_jobs()
    run.refresh_from_db()
    assert run.status == "failed" and "worker was lost" in run.error
    (call,) = delivered(conversation)
    assert "FAILED" in call.result



def test_an_async_runs_result_is_untrusted_when_untrusted_content_entered_its_conversation(conversation, alice):
    """Injection provenance (issue 30): the task's own conversation read untrusted content, so its
    delivered ``task_completed`` result taints the parent (docs/provenance.md)."""
    from types import SimpleNamespace

    from skald.jobs.delivery import run_trust
    from skald.sessions.services import session_create

    env = build_env(conversation)
    task_session = session_create(user=alice, agent="log-analyst", title="async task")
    run: Any = SimpleNamespace(session_id=task_session.pk)
    assert run_trust(env, run) == ("trusted", "")
    env.store.append_event(session_id=task_session.pk, kind="tool_result", key="untrusted-logs",
                           principal="system:test",
                           payload={"key": "e1:t1:c0", "name": "read_logs", "content": "log lines", "is_error": False,
                                    "status": "completed", "truncated": False, "trust": "untrusted"})
    assert run_trust(env, run) == ("untrusted", "the async task read untrusted content")
    assert run_trust(env, SimpleNamespace(session_id=None)) == ("trusted", "")
