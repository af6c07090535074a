"""Cron jobs (SPEC S4): a job row and its django-q2 schedule written together, one run per firing,
delivered to the owner's home conversation; the ``cron`` interface tool is gated like any tool."""

from __future__ import annotations

import pytest
from django_q.models import Schedule

from approvals.models import PendingApproval
from approvals.rules.seed import default_rules_ensure
from loop.models import SessionEvent
from loop.providers.loopback import text_turn, tool_turn
from skald.core.errors import SkaldError
from skald.jobs.cron import CRON_FUNC, cron_job_create
from skald.jobs.models import JobStatus, ScheduledJob
from skald.jobs.services import DEAD_LETTER_AFTER, job_cancel
from skald.models import Agent
from skald.tasks import deliver_due_jobs, run_cron_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def test_a_cron_job_is_a_schedule_and_each_firing_is_a_classified_delivered_run(alice, agents, script,
                                                                                 inline_tasks, conversation):
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly log check", expression="0 3 * * *",
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    schedule = Schedule.objects.get(pk=job.schedule_id)
    assert (schedule.func, schedule.args, schedule.cron) == (CRON_FUNC, str(job.pk), "0 3 * * *")
    assert schedule.next_run is not None and job.selection["rule"] == "auto:strength"

    script(text_turn("quiet night"), text_turn("second night"))
    assert run_cron_job(job.pk) == "succeeded"  # what the schedule calls on a worker
    assert run_cron_job(job.pk) == "succeeded"
    runs = list(job.runs.order_by("number"))
    assert [(r.number, r.status, r.output) for r in runs] == [(1, "succeeded", "quiet night"),
                                                              (2, "succeeded", "second night")]
    assert all(r.delivered_at is not None for r in runs)
    assert runs[0].session_id != runs[1].session_id  # each firing is its own conversation
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED  # a cron job keeps firing


def test_a_bad_expression_or_agent_is_refused_and_nothing_is_stored(alice, agents):
    for expression, agent, code in (("every night", "log-analyst", "cron_invalid"),
                                    ("0 3 * * *", "troubleshooter", "agent_not_task"),
                                    ("0 3 * * *", "nobody", "agent_unknown"),
                                    ("0 3 * * *", "log-analyst", "cron_home_required")):  # issue 27 §7
        with pytest.raises(SkaldError) as refused:
            cron_job_create(owner_id=alice.pk, agent=agent, task="t", expression=expression,
                            principal=f"user:{alice.pk}")
        assert refused.value.code == code
    assert not ScheduledJob.objects.exists() and not Schedule.objects.filter(func=CRON_FUNC).exists()


def test_cancelling_a_cron_job_removes_its_schedule(alice, agents, conversation):
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="t", expression="*/5 * * * *",
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    job_cancel(job_id=job.pk, principal=f"user:{alice.pk}")
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and not Schedule.objects.filter(func=CRON_FUNC).exists()
    assert run_cron_job(job.pk).startswith("not started")


@pytest.fixture
def may_schedule(agents) -> None:
    """The troubleshooter is given the ``cron`` interface tool (it does not declare it by default)."""
    agent = Agent.objects.get(name="troubleshooter")
    agent.allowed_tools = [*agent.allowed_tools, "cron"]
    agent.save()


def test_the_cron_tool_is_gated_like_any_tool(say, script, inline_tasks, may_schedule):
    default_rules_ensure()
    script(tool_turn(("cron", {"action": "create", "expression": "0 3 * * *", "agent": "log-analyst",
                               "task": "nightly"})))
    exchange = say("check the logs every night")
    assert exchange.status == "parked" and PendingApproval.objects.get().tool == "cron"
    assert not ScheduledJob.objects.exists()


def test_the_cron_tool_creates_lists_and_cancels(say, script, allow_all, inline_tasks, conversation, may_schedule):
    script(tool_turn(("cron", {"action": "create", "expression": "0 3 * * *", "agent": "log-analyst",
                               "task": "nightly"})),
           tool_turn(("cron", {"action": "list"})), text_turn("scheduled"))
    say("check the logs every night")
    job = ScheduledJob.objects.get()
    assert job.home_session_id == conversation.pk and job.cron == "0 3 * * *"
    script(tool_turn(("cron", {"action": "cancel", "job": job.pk})), text_turn("cancelled"))
    say("stop the nightly check")
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_a_cron_runs_result_reaches_its_home_conversation_with_its_output(alice, agents, conversation, script,
                                                                         inline_tasks):
    """Reproduction 7: the home conversation's task update carries the run's output (clipped) and a
    link to the firing's conversation, not just a status."""
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly", expression="0 3 * * *",
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    script(text_turn("three 502s at 03:00, all from the pool" + " detail" * 400))
    assert run_cron_job(job.pk) == "succeeded"

    run = job.runs.get()
    assert run.delivered_at is not None
    update = SessionEvent.objects.filter(session=conversation, kind="control:task_update").order_by("seq").last()
    assert update is not None and update.payload["kind"] == "cron" and update.payload["delivered"]
    assert update.payload["output"].startswith("three 502s at 03:00, all from the pool")
    assert update.payload["output"].endswith(" …") and len(update.payload["output"]) <= 1002
    assert update.payload["child_session"] == run.session_id


def test_a_cron_job_without_a_home_is_never_marked_delivered(alice, agents, conversation, script, inline_tasks):
    """Reproduction 7: a (legacy) cron job with no home reaches nobody: its run is not marked
    delivered; its delivery fails visibly and ends a dead letter."""
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly", expression="0 3 * * *",
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    ScheduledJob.objects.filter(pk=job.pk).update(home_session=None)  # as one made before homes were required
    script(text_turn("nothing unusual"))
    run_cron_job(job.pk)
    for _ in range(DEAD_LETTER_AFTER):
        deliver_due_jobs()

    run = job.runs.get()
    assert run.delivered_at is None and run.dead_lettered_at is not None
    assert "no home conversation" in run.delivery_error


def test_a_cron_job_that_notifies_its_owner_posts_to_their_notices_conversation(alice, bob, agents, script,
                                                                                inline_tasks):
    """Issue 27 §7, "notify the owner": no conversation is chosen; each run's result (with its output
    and the firing's conversation) reaches the owner's Notices conversation, one per owner, made on
    first use and made again if it was deleted. A conversation and the notice together are refused."""
    with pytest.raises(SkaldError) as both:
        cron_job_create(owner_id=alice.pk, agent="log-analyst", task="t", expression="0 3 * * *",
                        home_session_id=1, notify_owner=True, principal=f"user:{alice.pk}")
    assert both.value.code == "cron_home_ambiguous"
    first = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly", expression="0 3 * * *",
                            notify_owner=True, principal=f"user:{alice.pk}")
    second = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="weekly", expression="0 4 * * 1",
                             notify_owner=True, principal=f"user:{alice.pk}")
    theirs = cron_job_create(owner_id=bob.pk, agent="log-analyst", task="bob's", expression="0 5 * * *",
                             notify_owner=True, principal=f"user:{bob.pk}")
    notices = first.home_session
    assert notices is not None and (notices.owner_id, notices.source) == (alice.pk, "notices")
    assert second.home_session_id == notices.pk and theirs.home_session_id != notices.pk

    script(text_turn("quiet night"))
    assert run_cron_job(first.pk) == "succeeded"
    run = first.runs.get()
    assert run.delivered_at is not None
    update = SessionEvent.objects.filter(session=notices, kind="control:task_update").order_by("seq").last()
    assert update is not None and update.payload["delivered"] and update.payload["output"] == "quiet night"
    assert update.payload["child_session"] == run.session_id

    notices.delete()  # the owner deleted it: the next result makes it anew rather than reaching nobody
    script(text_turn("quiet again"))
    assert run_cron_job(first.pk) == "succeeded"
    first.refresh_from_db()
    assert first.home_session is not None and first.home_session.source == "notices"
    assert first.runs.get(number=2).delivered_at is not None
