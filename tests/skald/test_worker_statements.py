"""What a worker's task for one queued exchange costs the database, pinned as a count (issue 34).

The exchange is the stack benchmark's (``bench/stack_cost.py``): a user message admitted through
the session service (its outbox row and its task enqueued at commit), then the worker's task
(``skald.tasks.run_work``) as a django-q2 worker runs it: the outbox claim, the frame environment,
the stale-exchange check, the claim, the drive (two model calls around one ungated
``search_knowledge`` under the real approval rules), the run and job follow-ups. A change that adds a
statement on this path fails here; one that saves some lowers the pin.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.rules.seed import default_rules_ensure
from loop.models import Exchange, ExchangeStatus, Work
from skald.agents.seed import seed_agents
from skald.models import Agent
from skald.sessions.services import session_create, session_message_submit
from skald.tasks import run_work

# Per database, BEGIN and COMMIT included (was 75 and 59: the first delivery went through recovery, with
# a resumption's audit row and the frame tree's finishing reads; the follow-ups read the exchange three
# times and opened a locking transaction for a run that does not exist; the run and case facts are
# read only when a tool asks).
STATEMENTS = {"sqlite": 57, "postgresql": 42}
ONE_TOOL = {"kind": "chat", "description": "one ungated tool", "system_prompt": "You search, then answer.",
            "allowed_tools": ["search_knowledge"],
            "playbook": [{"tool": "search_knowledge", "args": {"query": "{input}"}},
                         {"answer": "found: {last_result}"}]}


def _queued(user, session, content: str) -> tuple[Exchange, Work]:
    exchange, _ = session_message_submit(user=user, session=session, content=content)
    return exchange, Work.objects.latest("pk")


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_a_workers_task_for_a_queued_one_tool_exchange_costs_its_pinned_statements(django_user_model, settings):
    settings.SKALD_PLAYBOOK_WORD_PAUSE_MS = 0
    seed_agents()
    default_rules_ensure()  # the rules a first boot seeds (a flushed test database has none)
    Agent.objects.create(name="one-tool", **ONE_TOOL)
    alice = django_user_model.objects.create_user(username="alice")
    session = session_create(user=alice, agent="one-tool", title="pinned")
    exchange, work = _queued(alice, session, "first")
    run_work(work.pk)  # the first task fills the process's caches
    exchange, work = _queued(alice, session, "second")

    with CaptureQueriesContext(connection) as captured:
        run_work(work.pk)

    exchange.refresh_from_db()
    assert exchange.status == ExchangeStatus.SETTLED and exchange.outcome == "completed"
    statements = [query["sql"] for query in captured.captured_queries]
    kinds = Counter(sql.split(None, 1)[0].upper() for sql in statements)
    listing = "\n".join(sql[:200] for sql in statements)
    assert len(statements) == STATEMENTS[connection.vendor], listing
    # What the durability contract needs is all there: the claim, the run's rows and the outbox's close.
    assert kinds["COMMIT"] >= 5 and any("loop_work" in sql and sql.startswith("UPDATE") for sql in statements[-1:])
