"""A batched store transaction's last write and its commit (``Journal.batch``, ``loop.sql.sent_with_commit``).

On PostgreSQL the batch's last statement travels with its COMMIT in one round trip (psycopg's
pipeline mode) when the batch is the outermost transaction; anywhere else it runs as it is and the
surrounding transaction decides. Marked ``db_sensitive``: ``make test`` runs it on both databases.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection, transaction

from loop.errors import PersistError
from loop.events import EventKind
from loop.models import Session, SessionEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


@pytest.fixture
def pipelines(monkeypatch):
    """How many times psycopg entered pipeline mode (the real method runs)."""
    entered = []
    real = psycopg.Connection.pipeline

    def spy(self):
        entered.append(1)
        return real(self)

    monkeypatch.setattr(psycopg.Connection, "pipeline", spy)
    return entered


@pytest.fixture
def commits_found(monkeypatch):
    """The server's transaction status each time Django asked psycopg to commit (the real commit runs)."""
    found = []
    real = psycopg.Connection.commit

    def spy(self):
        found.append(self.info.transaction_status.name)
        return real(self)

    monkeypatch.setattr(psycopg.Connection, "commit", spy)
    return found


def note(store, session, key: str, n: int) -> None:
    store.journal.append(session.pk, EventKind.NOTE, {"n": n}, key, fresh=True)


def stored(session) -> list[tuple[int, str]]:
    return list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("seq", "idempotency_key"))


def test_a_batch_commits_its_rows_then_wakes_the_viewers_once(store, session, bus, pipelines, commits_found):
    with store.journal.batch():
        note(store, session, "a", 1)
        note(store, session, "b", 2)
        store.journal.wake(session.pk, 2)
    assert stored(session) == [(1, "a"), (2, "b")]
    assert Session.objects.get(pk=session.pk).last_seq == 2
    assert bus.wakes == [(session.pk, 2)]  # after the commit, never before
    assert not connection.in_atomic_block
    if connection.vendor == "postgresql":  # the COMMIT went with the last write: Django found nothing to commit
        assert (len(pipelines), commits_found) == (1, ["IDLE"])
    else:
        assert pipelines == []


def test_a_batched_row_repeating_a_stored_key_refuses_and_commits_nothing(store, session, bus):
    with store.journal.batch():
        note(store, session, "a", 1)
    with pytest.raises(PersistError) as refused, store.journal.batch():
        note(store, session, "b", 2)
        note(store, session, "a", 3)  # fresh=True: the key is not looked up, the write refuses
        store.journal.wake(session.pk, 3)
    assert refused.value.code == "idempotency_conflict"
    assert stored(session) == [(1, "a")]
    assert Session.objects.get(pk=session.pk).last_seq == 1
    assert bus.wakes == []
    with store.journal.batch():  # the connection is usable again: no open pipeline, no broken transaction
        note(store, session, "c", 4)
    assert stored(session) == [(1, "a"), (2, "c")]


def test_a_batch_inside_a_transaction_commits_with_that_transaction(store, session, pipelines):
    with pytest.raises(RuntimeError), transaction.atomic():
        with store.journal.batch():
            note(store, session, "a", 1)
        assert stored(session) == [(1, "a")]  # written, not committed
        raise RuntimeError("the surrounding transaction fails")
    assert stored(session) == []
    assert Session.objects.get(pk=session.pk).last_seq == 0
    assert pipelines == []

    with transaction.atomic():
        with store.journal.batch():
            note(store, session, "b", 2)
    assert stored(session) == [(1, "b")]
