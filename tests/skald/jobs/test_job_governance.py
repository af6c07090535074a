"""A delegated frame keeps the governance a sync child has (issue 27 §1, §3, §4, §5), through the API
and the inline worker path: the tools an async task was granted survive an approval and a crash,
the organisation's own tripwire patterns guard its text, and a child's provider failure is the
child's."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from approvals.models import ApprovalStatus, PendingApproval, TripwirePattern
from approvals.rules.seed import default_rules_ensure
from approvals.tripwires.services import tripwire_pattern_save
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.cancellation import CancelToken
from loop.errors import ProviderError
from loop.models import Exchange, Frame, ToolCall
from loop.providers.base import Delta, ProviderRequest
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from skald.core.errors import Conflict
from skald.jobs import delivery
from skald.jobs.classify import Ending
from skald.jobs.cron import cron_job_create
from skald.jobs.delivery import deliver_due, deliveries_due
from skald.jobs.models import JobRun, ScheduledJob
from skald.jobs.runner import job_sync_from_exchange
from skald.jobs.selectors import tree_spend, tree_spends
from skald.jobs.services import (
    DEAD_LETTER_AFTER,
    job_cancel,
    job_run_delivery_failed,
    job_run_delivery_retry,
    job_run_finish,
    job_run_start,
    job_submit_task,
)
from skald.loop_adapters.runtime import set_provider_factory
from skald.loop_adapters.store import kernel_store
from skald.metrics import render as metrics_render
from skald.models import Agent
from skald.tasks import deliver_due_jobs, run_cron_job
from tests.skald.conftest import task_completed_calls
from tests.skald.test_frame_environment import ACME_KEY, Crash, Router, lapse_and_recover

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

WRITE = ("write_file", {"path": "notes.md", "content": "pool exhausted"})


@pytest.fixture
def routed(conversation) -> Iterator[tuple[Router, LoopbackProvider]]:
    route = Router(conversation.pk)
    provider = LoopbackProvider([route], repeat_last=True)
    set_provider_factory(lambda agent: provider)
    yield route, provider
    set_provider_factory(None)


def approve_next(api, carol) -> None:
    card = PendingApproval.objects.filter(status=ApprovalStatus.PENDING).order_by("pk").first()
    assert card is not None
    response = api(carol).post(f"/api/tools/{card.tool_call_id}/resolve", {"decision": "approve"}, format="json")
    assert response.status_code == 202, response.content


def job_requests(provider: LoopbackProvider, parent_session: int) -> list[list[str]]:
    return [[spec.name for spec in request.tools] for request in provider.calls
            if request.metadata["session"] != parent_session]


@pytest.mark.parametrize("crash", [False, True], ids=["resumed", "recovered"])
def test_an_async_childs_tools_stay_its_grant_after_an_approval(routed, conversation, say, api, carol, inline_tasks,
                                                                 crash):
    """Reproduction 1: the child asked for write_file only; after its write_file is approved (and
    after a crash, recovered) its next request still offers write_file only, never the agent's 11."""
    route, provider = routed
    default_rules_ensure()
    route.queues["root"].extend([
        tool_turn(("execute_subtask", {"task": "note it", "tools": ["write_file"], "mode": "async"})),
        text_turn("started"), text_turn("noted")])
    route.queues["job"].extend([tool_turn(WRITE), *([Crash] if crash else []), text_turn("written")])
    say("note the finding in the background")
    approve_next(api, carol)  # the parent's execute_subtask
    if crash:
        with pytest.raises(Crash):
            approve_next(api, carol)  # the child's write_file runs; the worker dies at its next turn
        run = JobRun.objects.get()
        assert run.exchange is not None
        lapse_and_recover(run.exchange)
    else:
        approve_next(api, carol)

    run = JobRun.objects.get()
    assert run.status == "succeeded"
    offered = job_requests(provider, conversation.pk)
    assert offered and all(names == ["write_file"] for names in offered), offered


def test_an_organisation_pattern_in_an_async_tasks_text_never_reaches_the_childs_model(
        routed, conversation, say, alice, api, allow_all, inline_tasks):
    """Reproductions 3 and 4: the organisation's own secret shape in an async task's text is refused
    before the child's model sees it; the task ends ``refused`` with the rule's name (never the
    secret), and that ending is delivered once, so the strip no longer shows it running."""
    route, provider = routed
    tripwire_pattern_save(actor=Actor.user(alice), changed=["created"],
                          pattern=TripwirePattern(name="acme-key", regex=r"ACME-[0-9A-F]{24}", keywords="acme-"))
    route.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": f"try the key {ACME_KEY}", "mode": "async"})),
        text_turn("started"), text_turn("it was refused")])
    route.queues["job"].append(text_turn("I used the key"))
    say("use the key in the background")

    job = ScheduledJob.objects.get()
    run = job.runs.get()
    assert (job.status, run.status) == ("refused", "refused") and "org:acme-key" in run.error
    assert not job_requests(provider, conversation.pk)  # the child's model was never called
    assert all(ACME_KEY not in str(request.messages) for request in provider.calls)
    # Delivered once, without the secret (its delivery used to be refused on every sweep).
    assert run.delivered_at is not None and deliver_due() == []
    (delivered,) = task_completed_calls(conversation)
    assert ACME_KEY not in delivered.result and "REFUSED before it ran" in delivered.result
    listed = api(alice).get(f"/api/{conversation.source}/tasks").json()
    assert [(row["id"], row["status"]) for row in listed["results"]] == [(job.pk, "refused")]


def test_a_delivery_that_keeps_failing_is_parked_as_a_dead_letter_and_never_blocks_others(
        routed, conversation, say, allow_all, inline_tasks, monkeypatch, admin_client):
    """Reproduction 4: one run whose delivery raises is counted, parked after DEAD_LETTER_AFTER
    tries (shown in the admin with its error, counted on /metrics), while the others are delivered;
    an operator's retry delivers it once."""
    route, _provider = routed
    route.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": "first", "mode": "async"}),
                  ("execute_task", {"agent": "log-analyst", "task": "second", "mode": "async"})),
        text_turn("started both"), text_turn("read one"), text_turn("read two")])
    route.queues["job"].extend([text_turn("a"), text_turn("b")])
    original = delivery.result_text

    def poisoned(job, run):
        if job.task == "first":
            raise RuntimeError("the parent conversation cannot take it")
        return original(job, run)

    monkeypatch.setattr(delivery, "result_text", poisoned)
    say("two tasks")
    # The two delegates run in parallel: their jobs' ids may come in either order.
    first, second = (JobRun.objects.get(job__task=task) for task in ("first", "second"))
    for _ in range(DEAD_LETTER_AFTER):
        deliver_due_jobs()
    first.refresh_from_db()
    second.refresh_from_db()
    assert second.delivered_at is not None
    assert first.delivered_at is None and first.dead_lettered_at is not None
    assert first.delivery_attempts == DEAD_LETTER_AFTER and "cannot take it" in first.delivery_error
    assert first.pk not in deliveries_due()  # the sweep leaves it to an operator
    assert b"skald_job_dead_letters 1.0" in metrics_render()
    page = admin_client.get("/admin/skald/jobrun/?delivery=dead")
    assert page.status_code == 200 and b"cannot take it" in page.content

    monkeypatch.setattr(delivery, "result_text", original)
    retried = admin_client.post("/admin/skald/jobrun/", {"action": "retry_delivery", "_selected_action": [first.pk]})
    assert retried.status_code == 302
    first.refresh_from_db()
    assert first.delivered_at is not None and first.dead_lettered_at is None
    assert len(task_completed_calls(conversation)) == 2
    assert b"skald_job_dead_letters 0.0" in metrics_render()


class Unavailable:
    """A child's provider that answers 503: the stream fails before its first delta."""

    name = "unavailable"

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        raise_it = ProviderError("503 Service Unavailable", code="provider_http_503")

        def failing() -> Iterator[Delta]:
            raise raise_it
            yield  # a generator: the failure comes with the first delta, as a real stream's does

        return failing()


def test_a_childs_provider_failure_is_the_childs_and_its_parent_reads_it(conversation, say, allow_all, inline_tasks):
    """Reproduction 5: the child ends provider_failed, the parent gets a turn and reads that as the
    tool's result, and the root completes: no budget_exceeded {accounting_incomplete}."""
    parent = LoopbackProvider([tool_turn(("execute_task", {"agent": "log-analyst", "task": "read the logs"})),
                               text_turn("the analyst is down; I will read the logs myself")])
    set_provider_factory(lambda agent: Unavailable() if agent.name == "log-analyst" else parent)
    try:
        exchange = say("why 502?")
    finally:
        set_provider_factory(None)

    assert exchange.outcome == "completed" and not exchange.accounting_incomplete
    child = Frame.objects.get(session=conversation, depth=1)
    assert child.outcome == "provider_failed"
    call = ToolCall.objects.get(session=conversation, tool="execute_task")
    assert call.status == "failed" and "ended provider_failed" in call.result
    assert "provider_http_503" in call.result
    read = [m for m in parent.calls[1].messages if "provider_failed" in str(m)]
    assert read, "the parent's next request carries the child's failure"


def test_a_task_cancelled_before_it_ran_returns_its_whole_reservation(conversation, say, alice):
    """Nothing was spent: the whole reservation goes back, once, with the cancelled ending."""
    set_provider_factory(lambda agent: LoopbackProvider([text_turn("ok")]))
    try:
        parent = say("hello")
    finally:
        set_provider_factory(None)
    job = job_submit_task(owner_id=alice.pk, source="web", parent_session_id=conversation.pk,
                          parent_exchange_id=parent.pk, parent_call_id=None, agent="log-analyst", task="dig",
                          tools=[], budget_tokens=300, client="", selection={}, scope_extras={})
    job_cancel(job_id=job.pk, principal=f"user:{alice.pk}")
    parent.refresh_from_db()
    assert (job.runs.get().returned_tokens, parent.returned_tokens) == (300, 300)
    with pytest.raises(Conflict):
        job_cancel(job_id=job.pk, principal=f"user:{alice.pk}")  # ended: nothing is returned twice
    parent.refresh_from_db()
    assert parent.returned_tokens == 300


def test_a_nested_tasks_return_reaches_the_root_when_its_spawning_task_has_ended(conversation, say, alice):
    """A task (500 reserved) spent 100 and reserved 200 for a task of its own, then ended: it gave
    back 200. Its task then ends having spent nothing: its 200 goes to the ended task's ledger and
    on up to the root's, so the root is charged exactly what the tree spent (100)."""
    set_provider_factory(lambda agent: LoopbackProvider([text_turn("ok")]))
    try:
        root = say("hello")
    finally:
        set_provider_factory(None)

    def submit(parent_session: int, parent_exchange: int, budget: int) -> ScheduledJob:
        return job_submit_task(owner_id=alice.pk, source="web", parent_session_id=parent_session,
                               parent_exchange_id=parent_exchange, parent_call_id=None, agent="log-analyst",
                               task="dig", tools=[], budget_tokens=budget, client="", selection={},
                               scope_extras={})

    upper = submit(conversation.pk, root.pk, 500)
    upper_run = job_run_start(job_id=upper.pk)
    assert upper_run is not None and upper.child_session_id is not None
    upper_exchange = kernel_store().exchanges.admit(session_id=upper.child_session_id, request_key="job:x",
                                                    content="dig", principal="system:tasks", config={}).exchange
    nested = submit(upper.child_session_id, upper_exchange.pk, 200)
    # Its ledger as its driver saved it: 100 spent on its calls, 200 reserved for the nested task.
    Exchange.objects.filter(pk=upper_exchange.pk).update(reserved_tokens=300, input_tokens=60, output_tokens=40)
    job_run_finish(run_id=upper_run.pk, ending=Ending("succeeded", "completed", ""), output="done",
                   exchange_id=upper_exchange.pk)
    root.refresh_from_db()
    assert root.returned_tokens == 200

    job_cancel(job_id=nested.pk, principal=f"user:{alice.pk}")  # it never ran: all 200 comes back
    root.refresh_from_db()
    upper_run.refresh_from_db()
    assert (root.returned_tokens, upper_run.returned_tokens) == (400, 400)  # the root paid 100 for the tree
    assert Exchange.objects.get(pk=upper_exchange.pk).returned_tokens == 200


def test_cancelling_a_task_parked_on_an_approval_withdraws_it_and_ends_the_task_cancelled(
        routed, conversation, say, api, alice, carol, inline_tasks):
    """Reproduction 6: the cancel answers 202 and takes effect at once: the task's approval is
    withdrawn (answering it is a 409), its run ends ``cancelled`` and that ending is delivered once."""
    route, _provider = routed
    default_rules_ensure()
    route.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": "note it", "mode": "async"})),
        text_turn("started"), text_turn("it was cancelled")])
    route.queues["job"].append(tool_turn(WRITE))
    Agent.objects.filter(name="log-analyst").update(allowed_tools=["write_file"])
    say("note it in the background")
    approve_next(api, carol)  # the parent's execute_task; the task then parks on its own call
    job = ScheduledJob.objects.get()
    card = PendingApproval.objects.get(status=ApprovalStatus.PENDING)

    response = api(alice).post(f"/api/{conversation.source}/tasks/{job.pk}/cancel")

    assert response.status_code == 202, response.content
    job.refresh_from_db()
    run = job.runs.get()
    assert (job.status, run.status) == ("cancelled", "cancelled")
    card.refresh_from_db()
    assert card.status == ApprovalStatus.CANCELLED
    answer = api(carol).post(f"/api/tools/{card.tool_call_id}/resolve", {"decision": "approve"}, format="json")
    assert answer.status_code == 409, answer.content
    assert run.delivered_at is not None
    (delivered,) = task_completed_calls(conversation)
    assert "was cancelled" in delivered.result
    # What the console reads (the task's conversation, through the API): the stop's row says the
    # task was withdrawn, so the card reads "Withdrawn: the task was cancelled", not an exchange stop.
    assert card.session_id == job.child_session_id
    events = api(alice).get(f"/api/sessions/{job.child_session_id}/events/").json()["results"]
    (stopped,) = [e["payload"] for e in events if e["kind"] == "canceled"]
    assert stopped == {"reason": "the task was cancelled", "cause": "withdrawn"}


def test_a_stopped_exchange_reads_as_a_stop_not_a_withdrawal(conversation, say, api, alice, inline_tasks):
    """The other side of the console's branch: a user's stop of a parked exchange says ``stop``."""
    default_rules_ensure()
    set_provider_factory(lambda agent: LoopbackProvider([tool_turn(WRITE)], repeat_last=True))
    try:
        say("write it down")
    finally:
        set_provider_factory(None)
    assert PendingApproval.objects.filter(status=ApprovalStatus.PENDING).count() == 1
    assert api(alice).post(f"/api/sessions/{conversation.pk}/stop/").status_code in (200, 202)
    events = api(alice).get(f"/api/sessions/{conversation.pk}/events/").json()["results"]
    (stopped,) = [e["payload"] for e in events if e["kind"] == "canceled"]
    assert stopped == {"reason": "stop requested", "cause": "stop"}


def spend(provider: LoopbackProvider, parent_session: int) -> tuple[int, int]:
    """(the parent's tokens, the task's tokens): every scripted call reports 120."""
    parent = sum(1 for request in provider.calls if request.metadata["session"] == parent_session)
    return parent * 120, (len(provider.calls) - parent) * 120


@pytest.mark.parametrize("agent_budget", [None, 240], ids=["deployment-bound", "agent-bound"])
def test_an_async_task_spends_from_its_roots_budget_never_a_fresh_one(
        routed, conversation, say, allow_all, inline_tasks, settings, agent_budget):
    """Reproduction 2: with a 600-token budget and 120 tokens a call, an async child used to get a
    fresh 600 (the tree spent 960). It now reserves its own bound (the agent's default budget, else
    the deployment's) from what the root has left at spawn, and the root cannot spend it twice."""
    route, provider = routed
    settings.SKALD_LOOP_BOUNDS = {"budget_tokens": 600}
    Agent.objects.filter(name="log-analyst").update(
        bounds={} if agent_budget is None else {"budget_tokens": agent_budget})
    usage = (60, 60)
    route.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": "dig", "mode": "async"}), usage=usage),
        text_turn("started", usage=usage), text_turn("read it", usage=usage)])
    route.queues["job"].extend([tool_turn(("scratchpad_set", {"key": "k", "value": "v"}), usage=usage)
                                for _ in range(8)])
    first = say("dig in the background")

    job = ScheduledJob.objects.get()
    reserved = 480 if agent_budget is None else agent_budget  # the root had 600 - 120 left at spawn
    assert job.budget_tokens == reserved
    run = job.runs.get()
    assert run.exchange is not None and run.exchange.budget_tokens == reserved
    assert run.outcome == "budget_exceeded"
    first.refresh_from_db()
    root_first_exchange = sum(1 for r in provider.calls if r.metadata["session"] == conversation.pk
                              and r.metadata["exchange"] == first.number) * 120
    _parent, task = spend(provider, conversation.pk)
    assert task == reserved  # it stopped at what it reserved
    assert root_first_exchange + task <= 600  # one budget for the exchange's tree, never 960
    parent, _task = spend(provider, conversation.pk)
    tree = tree_spend(session_id=conversation.pk)  # what the admin's run page and /metrics show
    assert (tree.own, tree.tasks, tree.task_count) == (parent, task, 1)
    assert f'skald_job_tokens_total{{kind="task"}} {float(task)}'.encode() in metrics_render()
    assert run.returned_tokens == 0  # it spent its whole reservation: nothing comes back


def test_what_an_async_task_did_not_spend_returns_to_its_root(
        routed, conversation, say, allow_all, inline_tasks, settings):
    """The root reserved 480 of its 600 for the task; the task spent 120 and ended, so 360 came back
    to the root's ledger when it ended (once, with its ending) and the root spent it: three more
    turns in the same exchange, where without the return its next turn was refused."""
    route, provider = routed
    settings.SKALD_LOOP_BOUNDS = {"budget_tokens": 600}
    Agent.objects.filter(name="log-analyst").update(bounds={})
    usage = (60, 60)
    route.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": "dig", "mode": "async"}), usage=usage),
        tool_turn(("scratchpad_set", {"key": "a", "value": "1"}), usage=usage),
        tool_turn(("scratchpad_set", {"key": "b", "value": "2"}), usage=usage),
        text_turn("done while it ran", usage=usage), text_turn("read it", usage=usage)])
    route.queues["job"].append(text_turn("found it", usage=usage))
    first = say("dig in the background and keep going")

    job = ScheduledJob.objects.get()
    run = job.runs.get()
    assert (job.budget_tokens, run.status, run.returned_tokens) == (480, "succeeded", 360)
    first.refresh_from_db()
    assert first.outcome == "completed"  # its 600 was reserved at spawn; the return let it finish
    assert first.returned_tokens == 360
    root_first_exchange = sum(1 for r in provider.calls if r.metadata["session"] == conversation.pk
                              and r.metadata["exchange"] == first.number) * 120
    assert root_first_exchange == 480 and root_first_exchange + spend(provider, conversation.pk)[1] == 600
    endings = [json.loads(event.payload) for event in AuditEvent.objects.filter(kind=AuditKind.JOB_STATE_CHANGED,
                                                                     subject_id=str(job.pk))]
    assert [p["returned_tokens"] for p in endings if p.get("to") == "succeeded"] == [360]

    job_sync_from_exchange(run.exchange_id)  # a redelivered ending (recovery) returns nothing twice
    first.refresh_from_db()
    assert first.returned_tokens == 360
    # /metrics: the tree's spend (the root's exchanges and its task's) as one observation, and the return.
    tree = tree_spend(session_id=conversation.pk)
    assert tree_spends() == [tree.total] and tree.task_count == 1
    rendered = metrics_render().decode()
    assert 'skald_tree_tokens_bucket{le="1000"} 1.0' in rendered
    assert f"skald_tree_tokens_sum {float(tree.total)}" in rendered and "skald_tree_tokens_count 1.0" in rendered
    assert "skald_job_tokens_returned_total 360.0" in rendered


def test_a_worker_lost_between_a_runs_end_and_its_delivery_strands_nothing(
        routed, conversation, say, allow_all, inline_tasks, monkeypatch):
    """A worker lost between a run's ending and its delivery (in-process: the delivery dies with a
    BaseException nothing catches): the parent's follow-up or the sweep delivers it, exactly once."""
    route, _provider = routed
    route.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": "dig", "mode": "async"})),
        text_turn("started"), text_turn("read it")])
    route.queues["job"].append(text_turn("found it"))
    original = delivery.job_run_deliver
    crashes = {"left": 1}

    def dies_once(*, run_id: int) -> str:
        if crashes["left"]:
            crashes["left"] -= 1
            raise Crash()  # the worker is lost after the ending committed, before its delivery
        return original(run_id=run_id)

    monkeypatch.setattr(delivery, "job_run_deliver", dies_once)
    try:  # where the crash surfaces depends on which thread ran the inline task
        say("dig in the background")
    except Crash:
        pass
    run = JobRun.objects.get()
    assert crashes["left"] == 0 and run.status == "succeeded"  # its first delivery died

    deliver_due_jobs()  # the sweep
    deliver_due_jobs()
    run.refresh_from_db()
    assert run.delivered_at is not None
    assert deliver_due() == [] and len(task_completed_calls(conversation)) == 1  # exactly once


def test_a_worker_lost_during_a_dead_letters_retry_strands_nothing(
        routed, conversation, alice, allow_all, inline_tasks, monkeypatch):
    """A dead letter whose retried delivery dies: the retry committed first, so the run is due again
    and the sweep delivers it, exactly once."""
    route, _provider = routed
    route.queues["job"].append(text_turn("nightly: nothing unusual"))
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly", expression="0 3 * * *",
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    original = delivery.job_run_deliver
    mode = {"now": "fail"}

    def flaky(*, run_id: int) -> str:
        if mode["now"] == "fail":
            return _fail(run_id)
        if mode["now"] == "die":
            mode["now"] = "ok"
            raise Crash()  # the worker carrying out the retry is lost
        return original(run_id=run_id)

    def _fail(run_id: int) -> str:
        job_run_delivery_failed(run_id=run_id, error="RuntimeError: the home cannot take it")
        return "failed"

    monkeypatch.setattr(delivery, "job_run_deliver", flaky)
    run_cron_job(job.pk)
    for _ in range(DEAD_LETTER_AFTER):
        deliver_due_jobs()
    run = JobRun.objects.get()
    assert run.dead_lettered_at is not None and run.delivered_at is None

    mode["now"] = "die"
    with pytest.raises(Crash):
        job_run_delivery_retry(run_id=run.pk, principal=f"user:{alice.pk}")
    run.refresh_from_db()
    assert run.dead_lettered_at is None and run.pk in deliveries_due()  # the retry committed: it is due
    deliver_due_jobs()
    deliver_due_jobs()
    run.refresh_from_db()
    assert run.delivered_at is not None
    assert AuditEvent.objects.filter(kind=AuditKind.JOB_DELIVERED, subject_id=str(job.pk)).count() == 1
