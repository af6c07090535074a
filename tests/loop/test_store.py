"""The durable store on its own (SPEC L4, L5): admission, claims, the narrative, calls, settlement.

Marked ``db_sensitive``: ``make test`` runs it on SQLite and again on PostgreSQL.
"""

from __future__ import annotations

import pytest

from loop.digest import events_digest
from loop.errors import PersistError, SessionAwaitingHuman, SessionBusy
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, FrameStatus, SessionEvent, ToolCall, ToolCallStatus
from loop.outcomes import (
    CancelCause,
    Canceled,
    Completed,
    TurnCapReached,
    build_receipt,
    outcome_from_receipt,
)
from loop.providers.base import fold_deltas
from loop.providers.loopback import tool_turn
from loop.sql import events as event_rows
from loop.store import Ledger, Store
from tests.loop.fakes import MemoryAuditSink, MemoryBus, SteppingClock

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

PRINCIPAL = "user:1"


def admit(store: Store, session, key: str = "k1", *, content: str = "hello", claim: str = ""):
    return store.exchanges.admit(session_id=session.pk, request_key=key, content=content, principal=PRINCIPAL,
                                 config={"budget_tokens": None}, claim_token=claim)


def planned(store: Store, exchange, *calls, turn: int = 1):
    frame = store.exchanges.root_frame(exchange)
    return store.exchanges.record_message_end(exchange=exchange, frame=frame, turn=turn,
                                              assembled=fold_deltas(tool_turn(*calls)), principal=PRINCIPAL,
                                              spent_tokens=0)


def seqs(session) -> list[int]:
    return list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))


def test_it_admits_an_exchange_with_its_user_row_root_frame_and_audit_row(store, session, audit, bus):
    admission = admit(store, session, content="hi there")
    exchange = admission.exchange
    assert not admission.replayed
    assert (exchange.number, exchange.status, exchange.claim_token) == (1, ExchangeStatus.OPEN, "")
    row = SessionEvent.objects.get(session=session)
    assert (row.seq, row.kind, row.payload) == (1, EventKind.USER, {"content": "hi there", "author": ""})
    assert store.exchanges.root_frame(exchange).depth == 0
    assert audit.labels("exchange") == ["loop.exchange.admitted"]
    assert bus.wakes == [(session.pk, 1)]  # after commit


def test_an_exact_retry_returns_the_stored_exchange_and_writes_nothing(store, session, audit):
    first = admit(store, session).exchange
    again = admit(store, session)
    assert again.replayed and again.exchange.pk == first.pk
    assert seqs(session) == [1] and audit.labels("exchange") == ["loop.exchange.admitted"]


def test_a_second_request_while_one_is_active_is_a_typed_refusal(store, session):
    exchange = admit(store, session).exchange
    with pytest.raises(SessionBusy):
        admit(store, session, "k2")
    store.exchanges.park(exchange, [], principal=PRINCIPAL)
    with pytest.raises(SessionAwaitingHuman):
        admit(store, session, "k3")
    assert Exchange.objects.filter(session=session).count() == 1


def test_one_driver_claims_an_open_exchange(store, session):
    exchange = admit(store, session).exchange
    assert store.exchanges.claim(exchange.pk, "worker-a")
    assert store.exchanges.claim(exchange.pk, "worker-a")  # the holder keeps it
    assert not store.exchanges.claim(exchange.pk, "worker-b")


def test_a_claim_made_with_the_admission_is_held_by_that_driver(store, session):
    exchange = admit(store, session, claim="inline").exchange
    assert exchange.claim_token == "inline" and exchange.claimed_at is not None
    assert not store.exchanges.claim(exchange.pk, "worker-b")


def test_narrative_rows_are_exactly_once_by_key_and_dense_per_session(store, session):
    admit(store, session)
    first = store.append_event(session_id=session.pk, kind=EventKind.NOTE, payload={"n": 1}, key="note-1",
                               principal=PRINCIPAL)
    again = store.append_event(session_id=session.pk, kind=EventKind.NOTE, payload={"n": 1}, key="note-1",
                               principal=PRINCIPAL)
    assert again.pk == first.pk
    with pytest.raises(PersistError) as refused:
        store.append_event(session_id=session.pk, kind=EventKind.NOTE, payload={"n": 2}, key="note-1",
                           principal=PRINCIPAL)
    assert refused.value.code == "idempotency_conflict"
    store.append_event(session_id=session.pk, kind=EventKind.NOTE, payload={"n": 3}, key="note-3",
                       principal=PRINCIPAL)
    assert seqs(session) == [1, 2, 3]  # the refused and repeated keys left no gap


def test_a_payload_over_the_cap_refuses_and_writes_nothing(session, alice, audit, bus, clock):
    small = Store(audit=audit, clock=clock, bus=bus, payload_cap=64)
    with pytest.raises(PersistError) as refused:
        small.append_event(session_id=session.pk, kind=EventKind.NOTE, payload={"text": "x" * 100}, key="big",
                           principal=PRINCIPAL)
    assert refused.value.code == "payload_too_large"
    assert seqs(session) == []


def test_a_message_end_plans_its_calls_and_a_result_settles_each(store, session):
    exchange = admit(store, session, claim="inline").exchange
    calls = planned(store, exchange, ("echo", {"text": "a"}), ("echo", "{not json"))
    assert [(c.call_key, c.status) for c, _ in calls] == [("e1:t1:c0", "planned"), ("e1:t1:c1", "planned")]
    assert calls[1][1].arguments is None  # the codec check, nothing more
    call = calls[0][0]
    store.calls.record_intent(call, principal=PRINCIPAL)
    store.calls.record_result(call, status=ToolCallStatus.COMPLETED, content="echo: a", is_error=False, truncated=False,
                              principal=PRINCIPAL)
    stored = ToolCall.objects.get(pk=call.pk)
    assert (stored.status, stored.result) == (ToolCallStatus.COMPLETED, "echo: a")
    kinds = list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["user", "assistant", "control:tool_intent", "tool_result", "control:tool_done"]
    assert Exchange.objects.get(pk=exchange.pk).turns == 1


def test_cancel_calls_ends_each_call_canceled_with_a_visible_reason(store, session, audit):
    exchange = admit(store, session, claim="inline").exchange
    calls = [c for c, _ in planned(store, exchange, ("echo", {}), ("nap", {}))]
    assert store.calls.cancel_calls(calls, reason="stop requested", principal=PRINCIPAL) == 2
    for call in ToolCall.objects.filter(exchange=exchange):
        assert (call.status, call.result, call.is_error) == (ToolCallStatus.CANCELED,
                                                             "tool call canceled: stop requested", True)
    results = SessionEvent.objects.filter(session=session, kind=EventKind.TOOL_RESULT)
    assert {r.payload["status"] for r in results} == {"canceled"}
    assert [row.payload["to"] for row in audit.rows if row.subject_type == "tool_call"] == ["canceled", "canceled"]


def test_take_awaiting_moves_a_parked_call_exactly_once(store, session):
    exchange = admit(store, session, claim="inline").exchange
    call = planned(store, exchange, ("echo", {}))[0][0]
    store.exchanges.park(exchange, [(call, lambda: {"request_id": "r1"})], principal=PRINCIPAL)
    assert Exchange.objects.get(pk=exchange.pk).status == ExchangeStatus.PARKED
    assert store.calls.awaiting_calls(exchange.pk) == 1
    assert store.calls.take_awaiting(call, to_status=ToolCallStatus.PLANNED, principal=PRINCIPAL)
    assert not store.calls.take_awaiting(call, to_status=ToolCallStatus.PLANNED, principal=PRINCIPAL)
    assert store.exchanges.reopen(exchange, principal=PRINCIPAL, reason="approved")
    assert not store.exchanges.reopen(exchange, principal=PRINCIPAL, reason="approved again")


def test_settle_writes_a_receipt_that_certifies_every_row_of_the_exchange(store, session, audit):
    exchange = admit(store, session, claim="inline").exchange
    receipt = store.exchanges.settle(exchange, Completed(answer="done"), principal=PRINCIPAL,
                                     ledger=Ledger(reserved_tokens=42, accounting_incomplete=False))
    stored = Exchange.objects.get(pk=exchange.pk)
    assert (stored.status, stored.outcome, stored.receipt, stored.claim_token) == (
        ExchangeStatus.SETTLED, "completed", receipt, "")
    assert stored.reserved_tokens == 42
    assert store.exchanges.root_frame(stored).status == FrameStatus.CLOSED
    rows = event_rows_of(exchange)
    assert receipt == build_receipt(stored, outcome="completed", events=rows, detail={"answer": "done"})
    assert receipt["digest"] == events_digest(rows) and receipt["events"] == 2
    settled = audit.rows[-1]
    assert settled.label == "loop.exchange.settled"
    assert settled.payload["ledger"] == {"reserved_tokens": 42, "accounting_incomplete": False}


def event_rows_of(exchange):
    from loop import sql

    with sql.cursor() as cursor:
        return event_rows.exchange_events(cursor, exchange.pk)


def test_a_receipt_gives_back_the_typed_outcome(store, session):
    outcomes = [Completed(answer="a"), TurnCapReached(turns=8), Canceled("stop requested"),
                Canceled("no longer needed", cause=CancelCause.CLOSED_BY_HUMAN)]
    for number, outcome in enumerate(outcomes):
        exchange = admit(store, session, f"k{number}", claim="inline").exchange
        store.exchanges.settle(exchange, outcome, principal=PRINCIPAL)
        stored = Exchange.objects.get(pk=exchange.pk)
        assert outcome_from_receipt(stored.outcome, stored.receipt) == outcome


def test_a_canceled_settlement_leaves_its_marker_before_the_end_row(store, session):
    exchange = admit(store, session, claim="inline").exchange
    store.exchanges.settle(exchange, Canceled("stop requested"), principal=PRINCIPAL)
    kinds = list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["user", "canceled", "control:exchange_settled"]


def test_a_broken_exchange_keeps_its_claim_and_refuses_a_retry(store, session, audit):
    exchange = admit(store, session, claim="dead-worker").exchange
    store.exchanges.mark_broken(exchange, code="worker_lost", message="gone", principal=PRINCIPAL)
    stored = Exchange.objects.get(pk=exchange.pk)
    assert (stored.status, stored.error_code, stored.claim_token) == (ExchangeStatus.BROKEN, "worker_lost",
                                                                      "dead-worker")
    assert not store.exchanges.claim(exchange.pk, "worker-b")
    assert admit(store, session).replayed  # the key answers with the broken exchange, never a re-run
    assert audit.labels("exchange")[-1] == "loop.exchange.broken"


def test_a_stop_request_is_sticky_and_only_for_active_exchanges(store, session):
    exchange = admit(store, session).exchange
    assert not store.exchanges.cancel_requested(exchange.pk)
    assert store.exchanges.request_cancel(exchange.pk, principal=PRINCIPAL)
    assert not store.exchanges.request_cancel(exchange.pk, principal=PRINCIPAL)
    assert store.exchanges.cancel_requested(exchange.pk)


def test_the_clock_and_bus_are_the_injected_ones(session, alice):
    clock, bus = SteppingClock(), MemoryBus()
    store = Store(audit=MemoryAuditSink(), clock=clock, bus=bus)
    exchange = admit(store, session).exchange
    assert exchange.created_at <= clock.current
    assert bus.wakes == [(session.pk, 1)]


def test_work_is_recorded_with_its_need_and_handed_out_until_done(store, session, clock):
    from django.db import transaction

    with transaction.atomic():
        first = store.work.add(key="drive:e1", task="skald.tasks.run_kernel_turn", args=[1])
        again = store.work.add(key="drive:e1", task="skald.tasks.run_kernel_turn", args=[1])
    assert again.pk == first.pk  # the same need is one row
    assert store.work.due() == [first.pk]
    taken = store.work.take(first.pk, lease_seconds=30)
    assert taken is not None and taken.attempts == 1
    assert store.work.take(first.pk, lease_seconds=30) is None  # held for the lease
    assert store.work.due() == []
    clock.advance(31)  # its taker died: it falls due again
    assert store.work.due() == [first.pk]
    assert store.work.done("drive:e1")
    assert store.work.due() == [] and store.work.take(first.pk, lease_seconds=30) is None


def test_work_outside_a_transaction_is_refused(store):
    with pytest.raises(AssertionError):
        store.work.add(key="k", task="t", args=[])


def test_a_lapsed_lease_strands_an_exchange_until_someone_claims_it(store, session, clock):
    exchange = admit(store, session, claim="worker-a").exchange
    assert store.exchanges.needing_recovery(unclaimed_for=30) == []
    clock.advance(31)
    assert store.exchanges.needing_recovery(unclaimed_for=30) == [exchange.pk]
    assert store.exchanges.stranded(exchange.pk, unclaimed_for=30)
    assert store.exchanges.claim_for_recovery(exchange.pk, "rescuer", principal=PRINCIPAL)
    assert store.exchanges.needing_recovery(unclaimed_for=30) == []
