"""Which failures mean "the database is not there" (503 database_unavailable), and which do not."""

from __future__ import annotations

import sqlite3

import pytest
from django import db

from skald.core.saturation import saturation_of


def _raised_by(action) -> BaseException:
    try:
        action()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_a_sqlite_file_that_cannot_be_opened_is_unavailable(tmp_path) -> None:
    exc = _raised_by(lambda: sqlite3.connect(tmp_path / "gone" / "skald.sqlite3").execute("SELECT 1"))
    busy = saturation_of(exc)
    assert busy is not None and busy.code == "database_unavailable" and busy.http_status == 503


def test_djangos_connection_already_closed_is_unavailable() -> None:
    busy = saturation_of(db.InterfaceError("connection already closed"))
    assert busy is not None and busy.code == "database_unavailable"


@pytest.mark.parametrize("error", [
    sqlite3.OperationalError("no such table: auth_user"),
    db.OperationalError("database is locked"),
    db.IntegrityError("UNIQUE constraint failed"),
    ValueError("bad input"),
])
def test_errors_of_the_request_or_the_schema_are_not(error: BaseException) -> None:
    assert saturation_of(error) is None
