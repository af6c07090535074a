"""Recorded chain heads against a cut-off tail (issue 11 §4): the scheduled checkpoint records and
exports a signed head, ``verify_chain`` checks against it and reports its age, and a tail truncated
together with the heads table is still caught by the exported head. On SQLite and PostgreSQL."""

from __future__ import annotations

import importlib
import json
import logging
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
import time_machine
from django.apps import apps as django_apps
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django_q.models import Schedule

from audit import chain
from audit.actors import Actor
from audit.heads import chain_head_checkpoint, chain_head_scheduled, chain_heads_sign, chain_verify_with_head
from audit.kinds import AuditKind
from audit.models import AuditEvent, ChainHead
from audit.services import audit_append, chain_head_export, chain_head_record
from skald.core import clock
from skald.core.errors import Conflict

pytestmark = [pytest.mark.django_db, pytest.mark.db_sensitive]

KEY = "head-signing-key"


@pytest.fixture
def sink(settings, tmp_path) -> Path:
    settings.SKALD_AUDIT_KEY = KEY
    settings.SKALD_CHAIN_HEAD_FILE = str(tmp_path / "heads" / "chain_head.json")
    return Path(settings.SKALD_CHAIN_HEAD_FILE)


def append(n: int) -> None:
    for i in range(n):
        with transaction.atomic():
            audit_append(actor=Actor.system("test"), kind=AuditKind.CASE_CREATED, subject_type="case",
                         subject_id=str(i), payload={"n": i})


def verify(*args: str) -> tuple[int, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_chain", *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return int(exit_.code), out.getvalue() + err.getvalue()
    return 0, out.getvalue() + err.getvalue()


def test_the_checkpoint_records_a_signed_head_and_exports_it_to_the_file_and_the_log(sink, caplog):
    append(3)
    with caplog.at_level(logging.INFO, logger="skald.audit.chain_head"):
        head = chain_head_checkpoint(actor=Actor.system("schedule"))
    exported = json.loads(sink.read_text())
    assert exported == {"seq": 4, "hash": head.hash, "recorded_at": chain.format_time(head.recorded_at),
                        "signature": chain.head_signature(KEY, seq=4, hash=head.hash, recorded_at=head.recorded_at)}
    assert json.dumps(exported, sort_keys=True) in caplog.text


def test_an_idle_chain_gets_no_new_head_row_per_tick(sink):
    append(2)
    first = chain_head_scheduled()
    assert chain_head_scheduled() == first  # nothing appended since: the same head, exported again
    assert (AuditEvent.objects.count(), ChainHead.objects.count()) == (first, 1)
    append(1)
    assert chain_head_scheduled() == first + 2  # the new row and the recording's own row


def test_a_tail_cut_together_with_the_heads_table_is_caught_by_the_exported_head(sink):
    append(5)
    head = chain_head_checkpoint(actor=Actor.system("schedule"))  # seq 6, exported
    append(3)
    with connection.cursor() as cursor:  # the database's writer covers their tracks
        cursor.execute("DELETE FROM audit_auditevent WHERE seq > %s", [3])
        cursor.execute("DELETE FROM audit_chainhead")
    code, text = verify()
    assert code == 1
    assert "BROKEN at seq 4:" in text
    assert f"checked against head seq {head.seq} (signed, {sink}" in text


def test_a_tail_cut_is_caught_by_the_recorded_heads_without_a_file(settings):
    settings.SKALD_AUDIT_KEY = KEY
    settings.SKALD_CHAIN_HEAD_FILE = ""
    append(5)
    chain_head_checkpoint(actor=Actor.system("schedule"))
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE seq > %s", [4])
    code, text = verify()
    assert code == 1 and "BROKEN at seq 5:" in text and "(signed, database," in text


def test_verify_reports_the_head_it_checked_against_and_its_age(sink):
    append(2)
    recorded_at = clock.now()
    with time_machine.travel(recorded_at, tick=False):
        head = chain_head_checkpoint(actor=Actor.system("schedule"))
    with time_machine.travel(recorded_at + timedelta(minutes=7), tick=False):
        report, checked = chain_verify_with_head()
        code, text = verify()
    assert report.ok and checked is not None
    assert (checked.seq, checked.hash, checked.source, checked.signed) == (head.seq, head.hash, str(sink), True)
    assert checked.age == timedelta(minutes=7)
    assert code == 0 and f"checked against head seq {head.seq} (signed, {sink}" in text and ", 420 s old)" in text


def test_the_honest_limit_rows_cut_after_the_last_head_go_unseen_but_the_head_age_says_so(sink):
    # What no head can catch: rows appended after the newest head and then cut. verify_chain says
    # which head it relied on and how old it is, so the operator knows the window (one interval).
    append(2)
    head = chain_head_checkpoint(actor=Actor.system("schedule"))
    append(2)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE seq > %s", [head.seq])
    report, checked = chain_verify_with_head()
    assert report.ok and checked is not None and checked.seq == head.seq == report.tip_seq


def test_verify_says_when_no_head_was_ever_recorded(settings):
    settings.SKALD_CHAIN_HEAD_FILE = ""
    append(1)
    code, text = verify()
    assert code == 0 and "checked against no recorded head" in text


def test_the_migration_schedules_the_checkpoint_every_five_minutes():
    migration = importlib.import_module("audit.migrations.0003_chain_head_schedule")
    Schedule.objects.filter(name=migration.NAME).delete()  # a transactional test may have flushed it
    migration.create_schedule(django_apps, None)
    schedule = Schedule.objects.get(name=migration.NAME)
    assert (schedule.func, schedule.schedule_type, schedule.minutes, schedule.repeats) == (
        "audit.heads.chain_head_scheduled", "I", 5, -1)


# --- heads need signatures once a key exists (issue 28 §4) --------------------------------------


def sign_heads() -> tuple[int, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("sign_chain_heads", stdout=out, stderr=err)
    except CommandError as exc:
        return 1, str(exc)
    return 0, out.getvalue()


def test_a_head_whose_signature_was_blanked_in_the_database_fails_verification(sink):
    """The attack: rewrite the chain, re-point the heads, blank their signatures."""
    append(3)
    chain_head_checkpoint(actor=Actor.system("schedule"))
    head = ChainHead.objects.get()
    ChainHead.objects.filter(pk=head.pk).update(signature="")
    sink.unlink()
    code, output = verify()
    assert code == 1 and f"recorded head #{head.seq} is unsigned while SKALD_AUDIT_KEY is set" in output


def test_an_exported_head_with_a_null_signature_fails_verification(sink, tmp_path):
    append(3)
    exported = chain_head_export(head=chain_head_checkpoint(actor=Actor.system("schedule")))
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**exported, "signature": None}))
    code, output = verify("--head", str(forged))
    assert code == 1 and f"exported head #{exported['seq']} is unsigned while SKALD_AUDIT_KEY is set" in output


def test_heads_recorded_before_the_key_are_signed_once_by_the_command_with_an_audit_row(sink, settings):
    settings.SKALD_AUDIT_KEY = ""
    append(2)
    old = [chain_head_record(actor=Actor.system("schedule")).seq for _ in range(2)]
    settings.SKALD_AUDIT_KEY = KEY
    assert verify()[0] == 1  # the key is set, the old heads are not signed yet
    code, output = sign_heads()
    assert (code, output.strip()) == (0, f"signed 2 head(s): seq {old[0]}, {old[1]}")
    assert all(chain.head_signature_valid(KEY, head) for head in ChainHead.objects.all())
    row = AuditEvent.objects.get(kind=AuditKind.CHAIN_HEADS_SIGNED)
    assert json.loads(row.payload) == {"heads": old} and row.actor_id == "sign_chain_heads"
    assert json.loads(sink.read_text())["signature"] is not None  # the latest head exported again, signed
    assert verify()[0] == 0
    assert sign_heads() == (0, "every recorded head is already signed\n")


def test_the_command_refuses_an_unsigned_head_newer_than_a_signed_one(sink):
    append(2)
    first = chain_head_record(actor=Actor.system("schedule"))
    second = chain_head_record(actor=Actor.system("schedule"))
    ChainHead.objects.filter(pk=second.pk).update(signature="")
    code, message = sign_heads()
    assert code == 1 and message.startswith("chain_head_unsigned_late:") and str(second.seq) in message
    assert ChainHead.objects.get(pk=second.pk).signature == "" and first.signature


def test_the_command_verifies_the_chain_first_and_signs_nothing_when_it_is_broken(sink, settings):
    settings.SKALD_AUDIT_KEY = ""
    append(3)
    head = chain_head_record(actor=Actor.system("schedule"))
    settings.SKALD_AUDIT_KEY = KEY
    with connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET payload = %s WHERE seq = 2", ['{"n":99}'])
    code, message = sign_heads()
    assert code == 1 and message.startswith("chain_broken:") and "seq 2" in message
    assert ChainHead.objects.get(pk=head.pk).signature == ""
    assert not AuditEvent.objects.filter(kind=AuditKind.CHAIN_HEADS_SIGNED).exists()


def test_the_service_refuses_without_a_key(settings):
    settings.SKALD_AUDIT_KEY = ""
    with pytest.raises(Conflict) as refused:
        chain_heads_sign(actor=Actor.system("test"))
    assert refused.value.code == "no_audit_key"
