"""Every frame is built one way (issue 27): a sync child, an async task and a cron run get the same
environment — tools, gate scope, budget, tripwire detector with the organisation's patterns,
compaction policy, process grant — when they first run, when they resume after an approval and
when they are recovered after a crash, through the real API and worker path.

The environment is observed where the kernel uses it: at every model turn of every frame."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from approvals.models import ApprovalStatus, PendingApproval, TripwirePattern
from approvals.rules.seed import default_rules_ensure
from approvals.tripwires.services import tripwire_pattern_save
from audit.actors import Actor
from loop.driver import FrameDrive
from loop.models import Exchange
from loop.providers.base import ProviderRequest
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from skald.core import clock
from skald.jobs.cron import cron_job_create
from skald.jobs.models import JobRun, ScheduledJob
from skald.loop_adapters.runtime import deployment_compaction, set_provider_factory
from skald.models import Agent
from skald.sessions.workspace import workspace_for
from skald.tasks import recover_exchange_task, run_cron_job

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

ACME_KEY = "ACME-0123456789ABCDEF01234567"
CHILD_TOOLS = ["read_logs", "write_file", "execute_cmd"]
WRITE = ("write_file", {"path": "report.md", "content": "pool exhausted"})


class Crash(BaseException):
    """The worker dies mid-turn: nothing in the kernel or the product catches it."""


class Router:
    """One scripted model for every frame, answering each frame from its own queue: the parent
    conversation's root, its sync child, and any job's conversation."""

    def __init__(self, parent_session: int) -> None:
        self.parent_session = parent_session
        self.queues: dict[str, deque[Any]] = defaultdict(deque)

    def key(self, request: ProviderRequest) -> str:
        if request.metadata["session"] != self.parent_session:
            return "job"
        return "child" if request.metadata["narrative"] else "root"

    def __call__(self, request: ProviderRequest) -> Any:
        turn = self.queues[self.key(request)].popleft()
        if turn is Crash:
            raise Crash()
        return turn


@pytest.fixture
def router(conversation) -> Iterator[Router]:
    route = Router(conversation.pk)
    provider = LoopbackProvider([route], repeat_last=True)
    set_provider_factory(lambda agent: provider)
    yield route
    set_provider_factory(None)


@pytest.fixture
def seen(monkeypatch) -> dict[str, list[dict[str, Any]]]:
    """What each frame's environment was at each of its model turns, keyed as the router keys."""
    frames: dict[str, list[dict[str, Any]]] = defaultdict(list)
    original = FrameDrive.model_turn

    def spy(self: FrameDrive, turn: int) -> Any:
        env = self.env
        key = "job" if ScheduledJob.objects.filter(runs__session_id=self.exchange.session_id).exists() else \
            ("child" if self.frame.depth else "root")
        frames[key].append({
            "tools": sorted(env.tools.names()),
            "exec": env.scope.exec_allowlist,
            "scope": (env.scope.principal, env.scope.user_id, env.scope.agent, env.scope.source,
                      str(env.scope.workspace), dict(env.scope.extras)),
            "detector": env.detector.kinds(f"the key is {ACME_KEY}"),
            "compaction": env.compaction,
            "budget": (env.bounds.budget_tokens, self.authority.budget_tokens),
            "cancel_wired": env.calls_canceled is not None,
            "agent": env.agent.name,
        })
        return original(self, turn)

    monkeypatch.setattr(FrameDrive, "model_turn", spy)
    return frames


@pytest.fixture
def governed(settings, agents, alice) -> None:
    """The organisation's own secret shape, a non-default compaction policy, a process grant the
    child's ask narrows, and the real approval rules."""
    settings.BRAIN_ENGINE_EXEC_ALLOWLIST = "ls,cat,grep"
    settings.SKALD_COMPACTION = {"threshold_tokens": 9000, "keep_rows": 7}
    settings.SKALD_LOOP_BOUNDS = {"budget_tokens": 50_000}
    default_rules_ensure()
    tripwire_pattern_save(actor=Actor.user(alice), changed=["created"],
                          pattern=TripwirePattern(name="acme-key", regex=r"ACME-[0-9A-F]{24}", keywords="acme-"))
    troubleshooter = Agent.objects.get(name="troubleshooter")
    troubleshooter.allowed_tools = [*troubleshooter.allowed_tools, "execute_cmd"]
    troubleshooter.save()
    Agent.objects.filter(name="log-analyst").update(allowed_tools=[*CHILD_TOOLS, "cron"],  # the parent has no cron
                                                    exec_allowlist=["cat", "grep", "rm"])


def approve_next(api, carol) -> None:
    card = PendingApproval.objects.filter(status=ApprovalStatus.PENDING).order_by("pk").first()
    assert card is not None, "nothing waits for approval"
    response = api(carol).post(f"/api/tools/{card.tool_call_id}/resolve", {"decision": "approve"}, format="json")
    assert response.status_code == 202, response.content


def lapse_and_recover(exchange: Exchange) -> None:
    """The worker died: its lease lapsed, and the sweep hands the exchange to recovery."""
    Exchange.objects.filter(pk=exchange.pk).update(lease_until=clock.now() - timedelta(seconds=60))
    recover_exchange_task(exchange.pk)


def expect(frames: list[dict[str, Any]], scope: tuple[Any, ...], budget: int = 50_000) -> None:
    """Three model turns (first run, after the approval, after the crash), one environment. The
    budget is the tree's: a sync child's ledger is its root's; an async task's is what it reserved
    from its root at spawn; a cron run's is its own bound."""
    assert len(frames) == 3, frames
    first = frames[0]
    assert first["tools"] == sorted(CHILD_TOOLS)  # the parent's ∩ the agent's ∩ the ask: never more
    assert first["exec"] == ("cat", "grep")  # the deployment's ∩ the agent's ask
    assert first["scope"] == scope
    assert first["detector"] == ["org:acme-key"]
    assert first["compaction"] == deployment_compaction() and first["compaction"].keep_rows == 7
    assert first["budget"] == (budget, budget)
    assert first["cancel_wired"] and first["agent"] == "log-analyst"
    assert frames[1] == first, "resume after approval built its environment another way"
    assert frames[2] == first, "recovery after a crash built its environment another way"


def scope_of(conversation, alice) -> tuple[Any, ...]:
    return (f"user:{alice.pk}", alice.pk, "troubleshooter", "web", str(workspace_for(conversation.pk)), {})


def test_a_sync_child_has_one_environment_first_after_approval_and_after_a_crash(
        governed, router, seen, conversation, say, api, alice, carol, inline_tasks):
    router.queues["root"].extend([tool_turn(("execute_task", {"agent": "log-analyst", "task": "write it up"})),
                                  text_turn("done")])
    router.queues["child"].extend([tool_turn(WRITE), Crash, text_turn("report written")])
    exchange = say("write the report")
    approve_next(api, carol)  # the root's delegation
    with pytest.raises(Crash):
        approve_next(api, carol)  # the child's write_file: it runs, then the worker dies at the next turn
    lapse_and_recover(exchange)

    exchange.refresh_from_db()
    assert exchange.outcome == "completed"
    expect(seen["child"], scope_of(conversation, alice))


def test_an_async_task_has_the_same_environment_first_after_approval_and_after_a_crash(
        governed, router, seen, conversation, say, api, alice, carol, inline_tasks):
    router.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": "write it up", "mode": "async"})),
        text_turn("started"), text_turn("the task wrote it")])
    router.queues["job"].extend([tool_turn(WRITE), Crash, text_turn("report written")])
    say("write the report in the background")
    approve_next(api, carol)  # the root's delegation: the job starts and parks on its write_file
    with pytest.raises(Crash):
        approve_next(api, carol)
    run = JobRun.objects.get()
    assert run.exchange is not None
    lapse_and_recover(run.exchange)

    run.refresh_from_db()
    assert run.status == "succeeded" and run.delivered_at is not None
    job = ScheduledJob.objects.get()
    assert job.budget_tokens is not None and job.budget_tokens < 50_000  # the root had spent some already
    expect(seen["job"], scope_of(conversation, alice), budget=job.budget_tokens)


def test_a_cron_run_has_the_same_environment_first_after_approval_and_after_a_crash(
        governed, router, seen, conversation, api, alice, carol, inline_tasks, settings):
    router.queues["job"].extend([tool_turn(WRITE), Crash, text_turn("report written")])
    root = tool_names_of("troubleshooter")
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="write the nightly report",
                          expression="0 3 * * *", tools=root, creator_exec=("ls", "cat", "grep"),
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    run_cron_job(job.pk)  # what the schedule calls: the run parks on its write_file
    with pytest.raises(Crash):
        approve_next(api, carol)
    run = JobRun.objects.get()
    assert run.exchange is not None
    lapse_and_recover(run.exchange)

    run.refresh_from_db()
    assert run.status == "succeeded"
    expect(seen["job"], (f"user:{alice.pk}", alice.pk, "log-analyst", "web", str(workspace_for(run.session_id)), {}))


def tool_names_of(agent: str) -> list[str]:
    return list(Agent.objects.get(name=agent).allowed_tools)


def test_every_origin_builds_the_same_environment(governed, router, seen, conversation, say, api, alice, carol,
                                                  inline_tasks) -> None:
    """The matrix's cross-check: a sync child and an async task of the same parent, and a cron run
    of the same owner, differ only where their records differ (the cron run's own scope)."""
    router.queues["root"].extend([
        tool_turn(("execute_task", {"agent": "log-analyst", "task": "now"}),
                  ("execute_task", {"agent": "log-analyst", "task": "later", "mode": "async"})),
        text_turn("one done, one started"), text_turn("both done")])
    router.queues["child"].append(text_turn("done now"))
    router.queues["job"].extend([text_turn("done later"), text_turn("done nightly")])
    say("two ways")
    approve_next(api, carol)
    approve_next(api, carol)
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly", expression="0 3 * * *",
                          tools=tool_names_of("troubleshooter"), creator_exec=("ls", "cat", "grep"),
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    run_cron_job(job.pk)

    child, task, cron = seen["child"][0], seen["job"][0], seen["job"][1]
    reserved = ScheduledJob.objects.get(kind="task").budget_tokens
    assert task["budget"] == (reserved, reserved) and child["budget"] == cron["budget"] == (50_000, 50_000)
    assert {k: v for k, v in task.items() if k != "budget"} == {k: v for k, v in child.items() if k != "budget"}
    assert {k: v for k, v in cron.items() if k not in ("scope", "budget")} == \
        {k: v for k, v in child.items() if k not in ("scope", "budget")}

