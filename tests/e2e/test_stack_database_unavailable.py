"""A database that goes away answers 503 ``database_unavailable`` with ``Retry-After`` on every route,
authentication included, never a 500 (issue 28 §5). On the real stack (daphne, pooled PostgreSQL
connections): the server's backends are terminated mid-life, then the database refuses connections.
Clients that retry on 503 get through once it is back.

PostgreSQL only: it runs in `make test`'s PostgreSQL pass (SQLite has no server to lose)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from tests.e2e.crash import pg_admin, with_dbname
from tests.e2e.stack import PASSWORD, Launch, Stack, template_clause, wait_for

# One worker runs the whole module: its stack and its database are made once.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.db_sensitive,
              pytest.mark.xdist_group("stack_db_unavailable")]

SERVER = os.environ.get("DATABASE_URL", "")
WAIT = 30.0  # a hang guard, not a time assertion


def _admin(*statements: str) -> None:
    pg_admin(SERVER, *statements)


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    if not SERVER.startswith(("postgres://", "postgresql://")):
        pytest.skip("PostgreSQL only: runs in the PostgreSQL pass (DATABASE_URL points to a server)")
    name = f"skald_unavailable_{os.getpid()}"
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"' + template_clause())
    yield name
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def stack(database: str, launch_stack: Launch) -> Stack:
    # The database first: fixtures end in reverse, so the stack stops (and records its last head)
    # before its database is dropped.
    # A pool wait of 1 s: a refusing database answers after it, not after the default 5 s.
    return launch_stack({"DATABASE_URL": with_dbname(SERVER, database), "SKALD_DB_POOL_TIMEOUT": "1"})


def _terminate(database: str) -> None:
    _admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}' "
           "AND pid <> pg_backend_pid()")


def _sessions(client: httpx.Client, token: str) -> httpx.Response:
    return client.get("/api/sessions/", headers={"Authorization": f"Bearer {token}"})


def _back_within_retries(client: httpx.Client, token: str) -> httpx.Response:
    """What a client that retries on 503 sees: 503s with Retry-After, then the answer."""
    def attempt() -> httpx.Response | None:
        response = _sessions(client, token)
        if response.status_code == 503:
            assert response.json()["code"] == "database_unavailable", response.text
            assert response.headers.get("Retry-After"), response.headers
            return None
        return response
    return wait_for(attempt, timeout=WAIT, interval=0.1, what="the API after the database came back")


def test_a_backend_terminated_mid_request_answers_503_database_unavailable_then_the_api_recovers(
        stack: Stack, database: str) -> None:
    """The request is held inside JWT authentication (its user look-up waits on a lock the test
    holds), its backend is terminated there, then the lock is released: a deterministic "mid-request"."""
    with stack.http() as client:
        token = stack.token("operator")
        assert _sessions(client, token).status_code == 200
        with psycopg.connect(with_dbname(SERVER, database).replace("postgres://", "postgresql://", 1)) as holder, \
                ThreadPoolExecutor(1) as pool:
            holder.execute("LOCK TABLE auth_user IN ACCESS EXCLUSIVE MODE")
            pending = pool.submit(_sessions, client, token)
            # The request's own backend: the web server's, waiting on the lock (a worker's sweep may read
            # users too and wait beside it; terminating that one would prove nothing).
            waiting = wait_for(lambda: holder.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' "
                "AND application_name = 'skald-web' AND pid <> pg_backend_pid()", [database]).fetchone(),
                timeout=WAIT, what="the request waiting")
            holder.execute("SELECT pg_terminate_backend(%s)", [waiting[0]])
            holder.rollback()  # the lock goes; the request's connection is already gone
            first = pending.result(timeout=WAIT)
        assert first.status_code == 503, first.text
        body = first.json()
        assert body["code"] == "database_unavailable" and body["extra"]["retry_after"] >= 1
        assert first.headers["Retry-After"] == str(body["extra"]["retry_after"])
        assert _back_within_retries(client, token).status_code == 200


def test_a_database_that_refuses_connections_answers_503_on_every_route(stack: Stack, database: str) -> None:
    with stack.http() as client:
        token = stack.token("operator")
        _admin(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            _terminate(database)
            routes = [
                ("GET", "/api/sessions/", {"Authorization": f"Bearer {token}"}, None),  # authentication first
                ("POST", "/api/auth/token/", {}, {"username": "operator", "password": PASSWORD}),
                ("GET", "/api/approvals/", {"Authorization": f"Bearer {token}"}, None),
            ]
            for method, path, headers, body in routes:
                response = client.request(method, path, headers=headers, json=body)
                assert response.status_code == 503, (path, response.status_code, response.text)
                assert response.json()["code"] == "database_unavailable", (path, response.text)
                assert response.headers.get("Retry-After"), path
        finally:
            _admin(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        assert _back_within_retries(client, token).status_code == 200
