"""The incremental verification the auditor's home runs on every refresh: it reads only the rows
appended since the last passing pass, and falls back to the whole chain when what it remembered
no longer holds."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import ChainHead
from audit.services import audit_append, chain_verified_tip_forget, chain_verify, chain_verify_incremental
from tests.audit.forge import delete_rows, tamper

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _nothing_remembered() -> None:
    chain_verified_tip_forget()


def append(n: int = 1) -> None:
    for _ in range(n):
        with transaction.atomic():
            audit_append(actor=Actor("user", "1"), kind=AuditKind.CASE_CREATED, subject_type="skald.case",
                         subject_id=7, payload={"title": "Drucker offline"})


def test_each_pass_reads_only_the_rows_appended_since_the_last(audit_chain) -> None:
    audit_chain(300)
    first, tip = chain_verify_incremental()
    assert first.ok and first.rows == 300 and tip is not None and tip.seq == 300
    append(2)
    second, tip = chain_verify_incremental()
    assert second.ok and second.rows == 2 and second.tip_seq == 302
    third, _ = chain_verify_incremental()
    assert third.ok and third.rows == 0 and third.tip_seq == 302


def test_a_bad_new_row_is_found(audit_chain) -> None:
    audit_chain(50)
    assert chain_verify_incremental()[0].ok
    append(3)
    tamper(52, "payload", '{"title":"forged"}')
    report, tip = chain_verify_incremental()
    assert not report.ok and report.first_bad_seq == 52 and tip is None


def test_a_rewritten_remembered_tip_sends_it_back_to_the_whole_chain(audit_chain) -> None:
    audit_chain(50)
    assert chain_verify_incremental()[0].ok
    tamper(50, "hash", "0" * 64)  # the remembered tip no longer holds: nothing is trusted
    report, _ = chain_verify_incremental()
    assert not report.ok and report.first_bad_seq == 50 and report.rows == 50


def test_a_tail_cut_below_a_recorded_head_is_found(audit_chain) -> None:
    audit_chain(40, head_at=40)
    assert chain_verify_incremental()[0].ok
    delete_rows("seq > %s", [30])
    report, _ = chain_verify_incremental()
    assert not report.ok and "behind the head recorded at seq 40" in (report.reason or "")


def test_a_head_recorded_below_the_remembered_tip_is_compared_with_its_row(audit_chain) -> None:
    rows = audit_chain(60)
    assert chain_verify_incremental()[0].ok
    ChainHead.objects.create(seq=20, hash="f" * 64, recorded_at=rows[19].time)  # not row 20's hash
    report, _ = chain_verify_incremental()
    assert not report.ok and report.first_bad_seq == 20


def test_a_full_verify_records_when_the_whole_chain_last_passed(audit_chain) -> None:
    audit_chain(10)
    assert chain_verify().ok
    report, tip = chain_verify_incremental()
    assert report.ok and report.rows == 0 and tip is not None and tip.seq == 10
