"""Writing and verifying the chain through the services, on SQLite and PostgreSQL."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit import chain
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent, ChainHead
from audit.selectors import audit_rows_in_chain_order
from audit.services import (
    CHAIN_LOCK_KEY,
    AuditEntry,
    AuditOutsideTransaction,
    audit_append,
    audit_append_statement,
    chain_head_export,
    chain_head_export_latest,
    chain_head_record,
    chain_verify,
)
from skald.core.errors import NotFound
from tests.audit.forge import ROW_COLUMNS, changed, delete_rows, shift_seqs, swap_seqs, tamper
from tests.strength import examples

pytestmark = pytest.mark.db_sensitive
KEY = "audit-key-for-tests"
ALICE = Actor("user", "1")


def append(**overrides: object) -> AuditEvent:
    fields: dict[str, object] = {
        "actor": ALICE,
        "kind": AuditKind.CASE_CREATED,
        "subject_type": "skald.case",
        "subject_id": 7,
        "payload": {"title": "Drucker offline"},
    }
    with transaction.atomic():
        return audit_append(**{**fields, **overrides})  # type: ignore[arg-type]


def value_of(seq: int, column: str) -> object:
    return AuditEvent.objects.values_list(column, flat=True).get(seq=seq)


# --- audit_append -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_appends_linked_rows_from_genesis():
    first = append()
    second = append(kind=AuditKind.CASE_UPDATED, payload={"b": 2, "a": [1, "ü"]})
    assert (first.seq, first.prev_hash) == (1, chain.GENESIS)
    assert (second.seq, second.prev_hash) == (2, first.hash)
    assert second.payload == '{"a":[1,"ü"],"b":2}'
    assert (first.subject_id, first.actor_type, first.actor_id) == ("7", "user", "1")
    stored = AuditEvent.objects.get(seq=2)
    fields = {c: getattr(stored, c) for c in ROW_COLUMNS if c != "hash"}
    assert stored.hash == chain.row_hash(**fields)


@pytest.mark.django_db
def test_it_takes_the_time_from_the_clock_in_utc():
    moment = datetime(2026, 5, 4, 12, 0, 0, 654321, tzinfo=timezone(timedelta(hours=2)))
    with time_machine.travel(moment, tick=False):
        row = append()
    row.refresh_from_db()
    assert row.time == moment and row.time.astimezone(UTC).hour == 10
    assert chain_verify().ok


def test_it_refuses_to_write_outside_a_transaction(transactional_db):
    with pytest.raises(AuditOutsideTransaction):
        audit_append(actor=ALICE, kind=AuditKind.CASE_CREATED, subject_type="skald.case", subject_id=1,
                     payload={})
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_the_row_rolls_back_with_the_change_it_records():
    append()
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_append(actor=ALICE, kind=AuditKind.CASE_UPDATED, subject_type="skald.case", subject_id=7,
                     payload={})
        raise RuntimeError("the change failed")
    assert list(AuditEvent.objects.values_list("seq", flat=True)) == [1]
    assert append().seq == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"payload": {"when": datetime(2026, 1, 1, tzinfo=UTC)}}, TypeError),
        ({"payload": {"x": math.nan}}, ValueError),
        ({"payload": {1: "int key"}}, TypeError),
        ({"payload": ["not", "a", "mapping"]}, TypeError),
        ({"kind": 999}, ValueError),
        ({"subject_id": "x" * 65}, ValueError),
        ({"subject_type": ""}, ValueError),
        ({"actor": Actor("robot", "1")}, ValueError),
    ],
)
def test_it_refuses_bad_input_loudly_and_writes_nothing(overrides, error):
    with pytest.raises(error):
        append(**overrides)
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_a_chain_written_by_the_service_verifies_with_no_false_positive():
    payloads = [
        {}, {"s": "Grüße ✓ 日本 🚀", "ctl": "\u0000\n\t"}, {"f": 0.1 + 0.2, "big": 2**70, "neg": -0.0},
        {"nested": {"a": [{"b": [None, True, False]}]}}, {"e": 1e-300, "g": 1.5e300},
    ]
    with transaction.atomic():  # many appends in one transaction link as well as one per transaction
        for index, payload in enumerate(payloads * 4):
            audit_append(actor=Actor.agent("troubleshooter"), kind=AuditKind.TURN_ENDED,
                         subject_type="loop.session", subject_id=index, payload=payload)
    chain_head_record(actor=Actor.system("cron"))
    report = chain_verify()
    assert (report.ok, report.rows, report.tip_seq) == (True, 21, 21)


@pytest.mark.django_db
def test_rows_appended_in_one_statement_link_in_order_and_never_go_back_in_time():
    """The kernel appends a transaction's audit rows in one statement (on PostgreSQL the server
    links them): each links to the one before, the hashes are the ones Python computes, and a
    clock that stepped back does not date a row before the tip."""
    later = datetime(2026, 5, 4, 12, 0, 0, 123456, tzinfo=UTC)
    with time_machine.travel(later, tick=False):
        first = append()
    texts = ['quote " and back \\ slash', "Grüße ✓ 🚀", "line\nbreak\ttab\u0001", "</script>&"]
    entries = [AuditEntry(Actor.agent("troubleshooter"), AuditKind.TURN_ENDED, "loop.session", n, {"n": n, "s": text})
               for n, text in enumerate(texts)]
    with time_machine.travel(later - timedelta(seconds=5), tick=False), transaction.atomic():
        statement, params = audit_append_statement(entries)
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
        second = append()  # a later append in the same transaction continues from those rows
    rows = list(audit_rows_in_chain_order())
    assert [row.seq for row in rows] == [1, 2, 3, 4, 5, 6] and second.seq == 6
    assert [row.prev_hash for row in rows[1:]] == [row.hash for row in rows[:-1]]
    assert [row.hash for row in rows] == [chain.row_hash(**{c: getattr(row, c) for c in ROW_COLUMNS if c != "hash"})
                                          for row in rows]
    assert [first.time, *(row.time for row in rows[1:])] == [later] * 6  # the clock said 5 s earlier
    assert (second.time, second.prev_hash, second.hash) == (rows[5].time, rows[4].hash, rows[5].hash)
    assert chain_verify().ok


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only: the functions of a rolling "
                    "upgrade exist there (SQLite links in Python under BEGIN IMMEDIATE, as before)")
def test_a_previous_release_appending_beside_this_one_keeps_one_chain():
    """A rolling upgrade: a worker of the previous release still takes the lock and reads the tip
    with ``audit_chain_tip`` and links its row in Python; its rows and this release's, linked on
    the server, make one chain that verifies."""
    append()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT tip_seq, tip_hash FROM audit_chain_tip(%s)", [CHAIN_LOCK_KEY])
        seq, prev_hash = cursor.fetchone()
        fields = {"seq": seq + 1, "time": datetime.now(UTC), "actor_type": "user", "actor_id": "1",
                  "kind": int(AuditKind.CASE_UPDATED), "subject_type": "skald.case", "subject_id": "7",
                  "payload": '{"release":"previous"}', "prev_hash": prev_hash}
        AuditEvent.objects.create(**fields, hash=chain.row_hash(**fields))
    last = append()
    assert (last.seq, last.prev_hash) == (3, AuditEvent.objects.get(seq=2).hash)
    assert chain_verify().ok


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_appends_hold_the_chain_lock_before_reading_the_head():
    """PostgreSQL: the append statement itself calls ``audit_chain_link``, which takes the advisory
    lock, then reads the head with a snapshot of its own. SQLite: every transaction begins
    IMMEDIATE, so the write lock is held from BEGIN."""
    with CaptureQueriesContext(connection) as queries:
        append()
    sql = [q["sql"] for q in queries.captured_queries]
    if connection.vendor == "postgresql":
        head = next(i for i, s in enumerate(sql) if "audit_chain_link(" in s)
        assert sql[head].startswith("INSERT INTO audit_auditevent")  # linked inside the INSERT
        assert not any("FROM audit_auditevent" in s.replace('"', '') for s in sql[:head])
        with connection.cursor() as cursor:
            cursor.execute("SELECT prosrc, provolatile FROM pg_proc WHERE proname = 'audit_chain_link'")
            source, volatility = cursor.fetchone()
        assert volatility == "v"  # VOLATILE: each statement inside takes a fresh snapshot
        assert source.index("pg_advisory_xact_lock") < source.index("FROM audit_auditevent")
    else:
        head = next(i for i, s in enumerate(sql) if "FROM audit_auditevent" in s.replace('"', ''))
        lock = next(i for i, s in enumerate(sql) if s.strip().upper() == "BEGIN IMMEDIATE")
        assert lock < head  # the lock is held before the head is read


# --- heads --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_recording_a_head_appends_its_event_and_records_that_row(settings):
    settings.SKALD_AUDIT_KEY = ""
    append()
    head = chain_head_record(actor=ALICE)
    event = AuditEvent.objects.get(seq=2)
    assert event.kind == AuditKind.CHAIN_HEAD_RECORDED and event.payload == '{"signed":false}'
    assert (head.seq, head.hash, head.recorded_at, head.signature) == (2, event.hash, event.time, "")
    assert chain_head_export() == {
        "seq": 2, "hash": event.hash, "recorded_at": chain.format_time(event.time), "signature": None,
    }


@pytest.mark.django_db
def test_a_head_is_signed_when_a_key_is_configured(settings):
    settings.SKALD_AUDIT_KEY = KEY
    head = chain_head_record(actor=ALICE)
    exported = chain_head_export()
    assert exported["signature"] == head.signature == chain.head_signature(
        KEY, seq=head.seq, hash=head.hash, recorded_at=exported["recorded_at"]
    )
    assert chain_verify().ok


@pytest.mark.django_db
def test_exporting_before_any_head_is_a_not_found():
    assert chain_head_export_latest() is None
    with pytest.raises(NotFound) as caught:
        chain_head_export()
    assert caught.value.code == "no_chain_head"


# --- chain_verify against an attacker's SQL on a 200-row chain -----------------------------------


@pytest.mark.django_db
def test_it_verifies_an_empty_and_an_intact_chain(audit_chain):
    assert chain_verify() == chain.VerifyReport(ok=True, rows=0)
    events = audit_chain(200, head_at=200)
    report = chain_verify()
    assert (report.ok, report.rows, report.tip_seq, report.tip_hash) == (True, 200, 200, events[-1].hash)
    assert chain.verify_rows(audit_rows_in_chain_order(chunk_size=7), []).ok


@pytest.mark.django_db
@pytest.mark.parametrize("column", ROW_COLUMNS)
def test_it_detects_an_sql_edit_of_any_column(audit_chain, column):
    audit_chain(200, head_at=200)
    for seq in (1, 137, 200):
        sid = transaction.savepoint()
        tamper(seq, column, changed(column, value_of(seq, column)))
        report = chain_verify()
        transaction.savepoint_rollback(sid)
        assert (report.ok, report.first_bad_seq) == (False, seq), (column, seq, report)
    assert chain_verify().ok


@pytest.mark.django_db
def test_it_detects_deleted_swapped_inserted_and_truncated_rows(audit_chain):
    events = audit_chain(200, head_at=200)

    def after(attack) -> chain.VerifyReport:
        sid = transaction.savepoint()
        attack()
        report = chain_verify()
        transaction.savepoint_rollback(sid)
        return report

    def forge_insert_at(seq: int) -> None:
        shift_seqs(seq, 1)
        fields = {c: getattr(events[seq - 1], c) for c in ROW_COLUMNS if c != "hash"}
        fields.update(payload='{"forged":true}', prev_hash=events[seq - 2].hash)
        AuditEvent.objects.create(**fields, hash=chain.row_hash(**fields))

    assert after(lambda: delete_rows("seq = %s", [60])).first_bad_seq == 60
    assert after(lambda: swap_seqs(60, 61)).first_bad_seq == 60
    assert after(lambda: forge_insert_at(60)).first_bad_seq == 61
    truncated = after(lambda: delete_rows("seq > %s", [180]))
    assert (truncated.first_bad_seq, truncated.reason) == (
        181, "chain ends at seq 180, behind the head recorded at seq 200"
    )


@pytest.mark.django_db
def test_an_exported_head_catches_a_truncation_that_also_removed_the_heads(audit_chain):
    audit_chain(100)
    exported = chain_head_export(head=chain_head_record(actor=ALICE))
    delete_rows("seq > %s", [90])
    ChainHead.objects.all().delete()
    assert chain_verify().ok  # what the database alone still says
    report = chain_verify(exported_head=exported)
    assert (report.ok, report.first_bad_seq) == (False, 91)


@pytest.mark.django_db
def test_it_detects_a_forged_head_signature(audit_chain, settings):
    settings.SKALD_AUDIT_KEY = KEY
    audit_chain(20)
    head = chain_head_record(actor=ALICE)
    ChainHead.objects.filter(pk=head.pk).update(signature="0" * 64)
    report = chain_verify()
    assert (report.ok, report.first_bad_seq) == (False, 21)
    assert "invalid signature" in report.reason


attack = st.one_of(
    st.tuples(st.just("edit"), st.integers(1, 60), st.sampled_from(ROW_COLUMNS)),
    st.tuples(st.sampled_from(["delete", "swap", "insert", "truncate"]), st.integers(1, 60), st.none()),
)


@pytest.mark.django_db
@settings(max_examples=examples(80), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(attacks=st.lists(attack, min_size=1, max_size=4))
def test_random_sql_attacks_are_detected(audit_chain, attacks):
    if not AuditEvent.objects.exists():
        audit_chain(60, head_at=60)  # once: every example rolls its attacks back
    original = list(AuditEvent.objects.order_by("seq").values_list(*ROW_COLUMNS))
    sid = transaction.savepoint()
    for op, seq, column in attacks:
        seqs = list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True))
        if not seqs:
            break
        target = seqs[(seq - 1) % len(seqs)]
        if op == "edit":
            new = changed(column, value_of(target, column))
            if column == "seq" and new in seqs:
                continue
            tamper(target, column, new)
        elif op == "delete":
            delete_rows("seq = %s", [target])
        elif op == "swap" and target != seqs[-1]:
            swap_seqs(target, seqs[seqs.index(target) + 1])
        elif op == "insert":
            shift_seqs(target, 1)
            prev = AuditEvent.objects.filter(seq__lt=target).order_by("-seq").first()
            fields = {"seq": target, "time": datetime(2026, 1, 1, tzinfo=UTC), "actor_type": "system",
                      "actor_id": "forger", "kind": 100, "subject_type": "x", "subject_id": "y",
                      "payload": "{}", "prev_hash": prev.hash if prev else chain.GENESIS}
            AuditEvent.objects.create(**fields, hash=chain.row_hash(**fields))
        elif op == "truncate":
            delete_rows("seq >= %s", [target])
    after = list(AuditEvent.objects.order_by("seq").values_list(*ROW_COLUMNS))
    report = chain_verify()
    transaction.savepoint_rollback(sid)
    assert report.ok == (after == original), (attacks, report)
