"""Fixtures for proposals: a case with a troubleshoot run, scripted providers, inline tasks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from loop.providers.loopback import LoopbackProvider
from proposals.models import Proposal
from skald.core import clock
from skald.models import Case, CaseLog, Run, RunStatus


@pytest.fixture(autouse=True)
def inline_work(settings, tmp_path) -> None:
    """Proposal tests run their tasks inline, each in its own workspace root."""
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"


@pytest.fixture
def launch(alice) -> Callable[..., Run]:
    """``launch(ticket=...)`` → a run of the troubleshooter on a fresh case, launched by alice.

    The workflow's launch service is another engineer's; the rows are created here the way it
    will create them (a session first, then the run that owns it).
    """
    from approvals.rules.seed import default_rules_ensure
    from skald.agents.seed import seed_agents
    from skald.loop_adapters.discovery import forget_seen
    from skald.sessions.services import session_create

    seed_agents()
    default_rules_ensure()
    forget_seen()
    counter = iter(range(1, 1000))

    def build(*, ticket: str = "Checkout returns 502 since the deploy\nSeen by three customers.",
              case_title: str = "Checkout 502s", logs: tuple[tuple[str, str], ...] = (), by=None) -> Run:
        n = next(counter)
        owner = by or alice
        case = Case.objects.create(title=case_title, created_by=owner, created_at=clock.now())
        CaseLog.objects.bulk_create([CaseLog(case=case, name=name, content=content) for name, content in logs])
        session = session_create(user=owner, agent="troubleshooter", title=f"run {n}")
        now = clock.now()
        return Run.objects.create(case=case, session=session, ticket=ticket, launched_by=owner,
                                  launch_key=f"test-launch-{n}", status=RunStatus.RUNNING,
                                  created_at=now, updated_at=now)

    return build


@pytest.fixture
def drive(script) -> Callable[..., LoopbackProvider]:
    """``drive(run, *turns)``: one user message on the run's session, answered by scripted turns."""
    from skald.sessions.services import session_message_submit

    def run_turns(run: Run, *turns, message: str | None = None) -> LoopbackProvider:
        provider = script(*turns)
        session_message_submit(user=run.launched_by, session=run.session, content=message or run.ticket)
        provider.assert_complete()
        return provider

    return run_turns


@pytest.fixture
def pending(launch) -> Callable[..., Proposal]:
    """``pending(title=..., body=...)`` → a pending proposal as capture leaves it, without driving a run."""
    counter = iter(range(1, 1000))

    def build(*, title: str = "Connection pool exhaustion causes checkout 502s",
              body: str = "Raise the pool size to 40 and alert on pool wait time.",
              run: Run | None = None) -> Proposal:
        run = run or launch()
        evidence = {
            "case": {"id": run.case_id, "title": run.case.title},
            "ticket": run.ticket,
            "run": {"id": run.pk, "status": "completed", "outcome": "completed", "launched_by": "alice"},
            "session": run.session_id,
            "exchange": 1,
            "source": {"kind": "tool_call", "tool_call_id": 0, "call_key": "e1:t2:c0", "narrative": ""},
            "agent_evidence": "app.log line 3",
            "events": [
                {"seq": 5, "kind": "tool_result", "tool": "read_logs", "is_error": False,
                 "excerpt": "ERROR pool: timeout waiting for connection (pool size 10)"},
                {"seq": 9, "kind": "assistant", "tool": "propose_knowledge",
                 "excerpt": f'propose_knowledge({{"title": "{title}"}})'},
            ],
        }
        return Proposal.objects.create(run=run, session=run.session, title=title, body=body, evidence=evidence,
                                       source_key=f"test:{next(counter)}", created_at=clock.now())

    return build
