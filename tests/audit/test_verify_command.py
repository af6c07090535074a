"""``manage.py verify_chain`` and ``manage.py record_chain_head``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from audit import chain
from audit.kinds import AuditKind
from audit.models import AuditEvent, ChainHead
from tests.audit.forge import delete_rows

pytestmark = [pytest.mark.django_db, pytest.mark.db_sensitive]


def run(*args: str) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``manage.py verify_chain *args``."""
    out, err = StringIO(), StringIO()
    try:
        call_command("verify_chain", *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return int(exit_.code), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def test_it_exits_0_on_a_fresh_database():
    code, out, _ = run()
    assert code == 0
    assert out.splitlines()[0] == f"audit chain intact: 0 rows, head seq 0 {chain.GENESIS}"
    assert out.splitlines()[1].startswith("checked against no recorded head")


def test_it_exits_0_on_an_intact_chain(audit_chain, settings):
    settings.SKALD_AUDIT_KEY = "k"
    events = audit_chain(200, head_at=200)
    code, out, _ = run()
    assert (code, out.splitlines()[0]) == (0, f"audit chain intact: 200 rows, head seq 200 {events[-1].hash}")
    assert out.splitlines()[1].startswith("checked against head seq 200 (signed, database, recorded ")


def test_it_exits_1_naming_the_seq_after_a_row_is_changed_with_sql(audit_chain):
    audit_chain(200, head_at=200)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET payload = %s WHERE seq = %s", ['{"n":0}', 42])
    with pytest.raises(SystemExit) as exit_:
        call_command("verify_chain", stdout=StringIO(), stderr=(err := StringIO()))
    assert exit_.value.code == 1
    assert err.getvalue().startswith("audit chain BROKEN at seq 42: hash does not match the row's content")


@pytest.mark.parametrize(
    ("sql", "seq"),
    [
        ("UPDATE audit_auditevent SET actor_id = 'mallory' WHERE seq = 7", 7),
        ("UPDATE audit_auditevent SET kind = 100 WHERE seq = 1", 1),
        ("UPDATE audit_auditevent SET prev_hash = hash WHERE seq = 99", 99),
        ("DELETE FROM audit_auditevent WHERE seq = 150", 150),
        ("DELETE FROM audit_auditevent WHERE seq > 190", 191),
    ],
)
def test_it_names_the_first_bad_seq(audit_chain, sql, seq):
    audit_chain(200, head_at=200)
    with connection.cursor() as cursor:
        cursor.execute(sql)
    code, _, err = run()
    assert code == 1 and f"BROKEN at seq {seq}:" in err


def test_record_chain_head_prints_the_exported_head_and_verify_uses_it(tmp_path, audit_chain, settings):
    settings.SKALD_AUDIT_KEY = "k"
    audit_chain(30)
    out = StringIO()
    call_command("record_chain_head", "--actor", "system:cron", stdout=out)
    exported = json.loads(out.getvalue())
    assert set(exported) == {"seq", "hash", "recorded_at", "signature"} and exported["seq"] == 31
    event = AuditEvent.objects.get(seq=31)
    assert (event.kind, event.actor_type, event.actor_id) == (AuditKind.CHAIN_HEAD_RECORDED, "system", "cron")

    head_file = tmp_path / "head.json"
    head_file.write_text(out.getvalue(), encoding="utf-8")
    assert run("--head", str(head_file))[0] == 0
    # The attacker cuts the tail and the heads table; the head kept outside still knows.
    delete_rows("seq > %s", [25])
    ChainHead.objects.all().delete()
    assert run()[0] == 0
    code, _, err = run("--head", str(head_file))
    assert code == 1 and "BROKEN at seq 26: chain ends at seq 25" in err


def test_it_refuses_an_unreadable_or_malformed_head_file(tmp_path):
    with pytest.raises(CommandError, match="cannot read head file"):
        call_command("verify_chain", "--head", str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"seq": "one"}', encoding="utf-8")
    with pytest.raises(CommandError, match="exported head: seq"):
        call_command("verify_chain", "--head", str(bad))
    with pytest.raises(CommandError, match="malformed principal"):
        call_command("record_chain_head", "--actor", "nobody")
