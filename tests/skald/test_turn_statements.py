"""What a durable one-tool exchange costs the database, pinned as counts (issue 14), not times.

The exchange is the benchmark's (``bench/kernel.py``): a user message, the model asks for one
``echo`` call, the tool runs, the model answers; the real store, audit chain and bus. Its
statements are round trips to the database, but on PostgreSQL each transaction's last write travels
with its COMMIT (``loop.sql.sent_with_commit``; Django's query capture, used here, turns that off
so every statement is seen): their number is the load-independent part of a turn's cost. A change
that adds one fails here; a change that saves some lowers the pin.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from audit.services import chain_verify
from bench.kernel import bench_provider, build_env, create_session, run_turn
from loop.models import SessionEvent

# Per database: every statement the exchange sends, BEGIN and COMMIT included (was 48 and 45, then
# 44 and 30, then 40 and 26). Lease fencing (issue 10) checks the claim in the statement that locks
# the session row; admission inserts without looking for a clash first (the constraints refuse one);
# on PostgreSQL the audit rows' INSERT takes the chain lock and links the rows on the server.
# Injection provenance (issue 30) reads the session's labelled rows once before the gate (+1).
STATEMENTS = {"sqlite": 41, "postgresql": 23}
COMMITS = 4  # admission + claim, message end + intent, the result, the last turn + settlement


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_a_one_tool_exchange_costs_its_pinned_statements_and_four_commits(django_user_model, tmp_path):
    user = django_user_model.objects.create_user(username="alice")
    provider = bench_provider()
    session = create_session(user.pk, "pinned")
    env = build_env(session, provider, tmp_path)
    run_turn(env, provider, 1)  # the first exchange fills the process's context window
    audit_before = AuditEvent.objects.count()

    with CaptureQueriesContext(connection) as captured:
        run_turn(env, provider, 2)

    statements = [query["sql"] for query in captured.captured_queries]
    kinds = Counter(sql.split(None, 1)[0].upper() for sql in statements)
    listing = "\n".join(sql[:160] for sql in statements)
    assert kinds["COMMIT"] == COMMITS, listing
    assert len(statements) == STATEMENTS[connection.vendor], listing
    # Nothing the durability contract needs went missing: seven rows, six audit rows, a sound chain.
    kinds_written = list(SessionEvent.objects.filter(session=session, exchange__number=2)
                         .order_by("seq").values_list("kind", flat=True))
    assert kinds_written == ["user", "assistant", "control:tool_intent", "tool_result", "control:tool_done",
                             "assistant", "control:exchange_settled"]
    assert AuditEvent.objects.count() - audit_before == 6
    assert chain_verify().ok
