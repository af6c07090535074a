"""A worker killed (SIGKILL) just before or just after the compaction row leaves a well-formed
history, and the session goes on in another process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from loop.compaction.prompt import is_summary_request
from loop.context import ContextBuilder
from loop.driver import run_turns_keyed
from loop.models import Exchange, ExchangeStatus, SessionEvent
from loop.outcomes import Completed
from loop.projection import EventRow, arrange_window, project
from loop.recovery import recover_exchange, repair_dangling
from loop.verify import load_session_rows, verify_rows
from tests.loop.compaction.conftest import SMALL, scripted_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive, pytest.mark.slow]
BASE = Path(__file__).resolve().parents[3]


def child_env(failpoint: str) -> dict[str, str]:
    db = connection.settings_dict
    env = {**os.environ, "SKALD_FAILPOINTS": failpoint, "PYTHONPATH": str(BASE),
           "DJANGO_SETTINGS_MODULE": "skald.settings"}
    if connection.vendor == "sqlite":
        env["SKALD_SQLITE_PATH"] = str(db["NAME"])
        env.pop("DATABASE_URL", None)
    else:
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return env


def crash_in_child(session_id: int, failpoint: str) -> None:
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("crash_child.py")), str(session_id), "1", "12"],
                          env=child_env(failpoint), cwd=BASE, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


def assert_well_formed(session_id: int) -> None:
    rows = [EventRow(e.seq, e.kind, e.payload, e.exchange_id, e.narrative)
            for e in SessionEvent.objects.filter(session_id=session_id,
                                                 kind__in=["user", "assistant", "tool_result", "compaction"])
            .order_by("seq")]
    project(arrange_window(rows))  # refuses loudly on a partial group, an orphan or a misplaced boundary
    for row in SessionEvent.objects.filter(session_id=session_id, kind="compaction"):
        assert SessionEvent.objects.filter(session_id=session_id, kind="control:compaction_probe",
                                           payload__compaction_seq=row.seq).count() == 1


@pytest.mark.parametrize("failpoint", ["loop.compaction.before_row", "loop.compaction.after_row"])
def test_a_crash_around_the_compaction_row_leaves_a_well_formed_history(failpoint, make_env, session):
    crash_in_child(session.pk, failpoint)
    written = SessionEvent.objects.filter(session=session, kind="compaction").count()
    assert written == (0 if failpoint.endswith("before_row") else 1)
    store = make_env(scripted_model()).store
    assert store.compactions.episode(session.pk).compactions == written  # counted with its rows, never apart
    assert_well_formed(session.pk)
    crashed = Exchange.objects.get(session=session, status=ExchangeStatus.OPEN)

    # What the repair schedule does for a dead worker, then the session goes on here.
    env = make_env(scripted_model(), compaction=SMALL, context=ContextBuilder())
    repair_dangling(env, crashed, reason="worker lost (test)")
    result = run_turns_keyed(env, request_key="after-crash", content="check 13")
    assert isinstance(result.outcome, Completed)
    assert_well_formed(session.pk)
    rows = list(SessionEvent.objects.filter(session=session, kind="compaction").order_by("seq"))
    assert len(rows) >= 1
    ranges = [(r.payload["manifest"]["first_seq"], r.payload["manifest"]["last_seq"]) for r in rows]
    assert len(set(ranges)) == len(ranges), "no range is compacted twice"
    assert store.compactions.episode(session.pk).compactions == len(rows)  # one episode across the exchanges
    assert verify_rows(load_session_rows(session.pk)) == []  # replay-verify: windows, manifests, probes


@pytest.mark.parametrize("failpoint", ["loop.compaction.before_row", "loop.compaction.after_row"])
def test_recovery_resumes_the_exchange_a_crash_left_mid_compaction(failpoint, make_env, session, clock):
    crash_in_child(session.pk, failpoint)
    crashed = Exchange.objects.get(session=session, status=ExchangeStatus.OPEN)
    before = list(SessionEvent.objects.filter(session=session, kind="compaction").values_list("seq", flat=True))
    clock.advance(300)  # the dead worker's lease (and any drift of its own clock) lapses

    # The database is the truth: a rescuer resumes the crashed exchange itself, nothing is redone twice.
    provider = scripted_model()
    env = make_env(provider, compaction=SMALL, context=ContextBuilder())
    result = recover_exchange(env, crashed.pk, claim_token="rescuer")

    assert result is not None and isinstance(result.outcome, Completed)
    assert Exchange.objects.get(pk=crashed.pk).status == ExchangeStatus.SETTLED
    assert_well_formed(session.pk)
    rows = list(SessionEvent.objects.filter(session=session, kind="compaction").order_by("seq"))
    assert [row.seq for row in rows[:len(before)]] == before  # a committed compaction is kept as it is
    ranges = [(r.payload["manifest"]["first_seq"], r.payload["manifest"]["last_seq"]) for r in rows]
    assert len(set(ranges)) == len(ranges), "no range is compacted twice"
    summaries = sum(1 for request in provider.calls if is_summary_request(request))
    if failpoint.endswith("after_row"):
        assert summaries == 0, "the committed compaction is found, not written again"
    else:
        assert len(rows) == 1 and summaries == 1, "the lost cycle runs again, once"
    assert verify_rows(load_session_rows(session.pk)) == []
