"""The store's cursor (``loop.sql.cursor``): the driver's own, behaving as Django's where it matters.

Marked ``db_sensitive``: ``make test`` runs it on SQLite and again on PostgreSQL.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from loop import sql
from loop.models import Session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


@pytest.fixture
def session(django_user_model):
    owner = django_user_model.objects.create_user(username="owner")
    return Session.objects.create(owner=owner, agent="troubleshooter", created_at=timezone.now())


def test_placeholders_and_a_literal_percent_read_as_with_djangos_cursor():
    with sql.cursor() as cursor:
        assert isinstance(cursor, sql.DriverCursor)  # not Django's: nothing records queries here
        cursor.execute("SELECT %s, %s, '100%%'", [7, "seven"])
        assert tuple(cursor.fetchone()) == (7, "seven", "100%")
        cursor.execute("SELECT 1 UNION ALL SELECT 2 ORDER BY 1")
        assert [tuple(row) for row in cursor.fetchall()] == [(1,), (2,)]


def test_it_writes_in_the_callers_transaction_and_rolls_back_with_it(session):
    with pytest.raises(RuntimeError), transaction.atomic():
        with sql.cursor() as cursor:
            cursor.execute("UPDATE loop_session SET last_seq = %s WHERE id = %s", [41, session.pk])
        raise RuntimeError("the caller fails after the write")
    assert Session.objects.get(pk=session.pk).last_seq == 0

    with transaction.atomic(), sql.cursor() as cursor:
        cursor.execute("UPDATE loop_session SET last_seq = %s WHERE id = %s", [42, session.pk])
    assert Session.objects.get(pk=session.pk).last_seq == 42


def test_a_driver_error_is_djangos_and_the_broken_transaction_refuses_more(session):
    with pytest.raises(IntegrityError), transaction.atomic(), sql.cursor() as cursor:
        cursor.execute("INSERT INTO loop_session (id, owner_id, agent, source, title, created_at, last_seq, "
                       "exchange_count) SELECT id, owner_id, agent, source, title, created_at, last_seq, "
                       "exchange_count FROM loop_session WHERE id = %s", [session.pk])

    with transaction.atomic():
        with pytest.raises(IntegrityError), transaction.atomic(), sql.cursor() as cursor:  # a savepoint
            cursor.execute("UPDATE loop_session SET owner_id = NULL WHERE id = %s", [session.pk])
        with sql.cursor() as cursor:  # the savepoint rolled back: the outer block goes on
            cursor.execute("SELECT last_seq FROM loop_session WHERE id = %s", [session.pk])
            assert cursor.fetchone()[0] == 0

    with pytest.raises(TransactionManagementError), transaction.atomic():
        connection.set_rollback(True)
        with sql.cursor() as cursor:
            cursor.execute("SELECT 1")


def test_while_django_records_queries_the_statements_are_recorded(session):
    with CaptureQueriesContext(connection) as captured, sql.cursor() as cursor:
        cursor.execute("SELECT last_seq FROM loop_session WHERE id = %s", [session.pk])
        assert cursor.fetchone()[0] == 0
    [recorded] = [query["sql"] for query in captured.captured_queries]
    assert recorded.startswith("SELECT last_seq FROM loop_session WHERE id = ")


def test_an_execute_wrapper_sees_the_statements(session):
    seen = []

    def record(execute, sql_text, params, many, context):
        seen.append(sql_text)
        return execute(sql_text, params, many, context)

    with connection.execute_wrapper(record), sql.cursor() as cursor:
        cursor.execute("SELECT last_seq FROM loop_session WHERE id = %s", [session.pk])
        assert cursor.fetchone()[0] == 0
    assert seen == ["SELECT last_seq FROM loop_session WHERE id = %s"]
