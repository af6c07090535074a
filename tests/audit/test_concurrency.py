"""Concurrent writers on separate connections never fork the chain."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent, ChainHead
from audit.services import audit_append, chain_head_record, chain_verify

# 8 writers x 200 appends on both databases: PostgreSQL serialises with its advisory lock, SQLite with BEGIN
# IMMEDIATE (about 2 s here either way).
WRITERS, APPENDS = 8, 200


@pytest.mark.db_sensitive
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_leave_one_unforked_chain_that_verifies():
    writers, appends = WRITERS, APPENDS
    start = threading.Barrier(writers)
    failures: list[BaseException] = []

    def write(number: int) -> None:
        try:
            start.wait()
            for index in range(appends):
                with transaction.atomic():
                    audit_append(actor=Actor.agent(f"writer-{number}"), kind=AuditKind.EVENT_APPENDED,
                                 subject_type="test.writer", subject_id=number, payload={"i": index})
                if index % 50 == 49:
                    chain_head_record(actor=Actor.system(f"writer-{number}"))
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()  # each thread has its own connection; leave none behind

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    heads = writers * (appends // 50)
    total = writers * appends + heads
    assert list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True)) == list(range(1, total + 1))
    assert ChainHead.objects.count() == heads
    for number in range(writers):
        mine = AuditEvent.objects.filter(subject_type="test.writer", subject_id=str(number))
        assert [int(p[5:-1]) for p in mine.values_list("payload", flat=True)] == list(range(appends))
    report = chain_verify()
    assert (report.ok, report.rows, report.tip_seq) == (True, total, total)
