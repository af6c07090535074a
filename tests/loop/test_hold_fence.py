"""``Store.hold_fence``: an effect outside the journal passes the journal's own lease check.

Marked ``db_sensitive``: ``make test`` runs it on SQLite and again on PostgreSQL.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from loop.errors import LeaseLost
from loop.models import Session
from loop.store import Store
from tests.loop.fakes import MemoryAuditSink, MemoryBus, SteppingClock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

LEASE = 30


@pytest.fixture
def clock() -> SteppingClock:
    return SteppingClock()


@pytest.fixture
def store(clock) -> Store:
    return Store(audit=MemoryAuditSink(), clock=clock, bus=MemoryBus(), lease_seconds=LEASE)


@pytest.fixture
def session(store, django_user_model) -> Session:
    user = django_user_model.objects.create(username="alice")
    return store.create_session(owner_id=user.pk, agent="a", source="web", title="t", principal="user:1")


def admitted(store: Store, session: Session, claim: str) -> int:
    return store.exchanges.admit(session_id=session.pk, request_key="k1", content="go", principal="user:1",
                                 config={}, claim_token=claim).exchange.pk


def test_it_passes_while_the_driver_holds_its_lease_and_refuses_once_taken_over(store, session, clock):
    exchange_id = admitted(store, session, "worker-a")
    fenced = store.fenced(exchange_id, "worker-a")
    with transaction.atomic():
        fenced.hold_fence(session.pk)  # held: nothing raised
    clock.advance(LEASE + 1)
    assert store.exchanges.claim_for_recovery(exchange_id, "rescuer", principal="user:1")
    with pytest.raises(LeaseLost), transaction.atomic():
        fenced.hold_fence(session.pk)
    with transaction.atomic():
        store.hold_fence(session.pk)  # an unfenced store (no driver) is not refused


def test_a_scratchpad_value_of_a_driver_taken_over_is_not_stored(store, session, clock):
    exchange_id = admitted(store, session, "worker-a")
    fenced = store.fenced(exchange_id, "worker-a")
    fenced.scratchpad_set(session.pk, "k", "first", principal="user:1")
    clock.advance(LEASE + 1)
    assert store.exchanges.claim_for_recovery(exchange_id, "rescuer", principal="user:1")
    store.fenced(exchange_id, "rescuer").scratchpad_set(session.pk, "k", "newer", principal="user:1")
    with pytest.raises(LeaseLost):
        fenced.scratchpad_set(session.pk, "k", "stale", principal="user:1")
    assert store.scratchpad_get(session.pk, "k") == "newer"


def test_the_fence_is_checked_outside_a_transaction_never(store, session):
    exchange_id = admitted(store, session, "worker-a")
    with pytest.raises(AssertionError):
        store.fenced(exchange_id, "worker-a").hold_fence(session.pk)
