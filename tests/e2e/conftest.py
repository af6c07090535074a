"""End-to-end fixtures: the real stack (daphne + a django-q2 qcluster started by
``python -m skald.launcher``), one per module where possible, stopped with SIGTERM at the end.

These tests never touch pytest-django's database: they talk HTTP and websockets only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.e2e.crash import Database, forked_children, pass_database, pg_admin, with_dbname
from tests.e2e.stack import Api, Launch, Stack, launch, template_clause


@pytest.fixture(scope="module")
def launch_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    """``launch_stack(extra_env={...}, var_dir=None, wait=True, fresh=False)`` → a running
    :class:`Stack` (``fresh``: from an empty var dir, see :func:`tests.e2e.stack.launch`).

    Every stack still running at the end of the module is stopped with SIGTERM; its stop asserts a
    zero exit and that no daphne or qcluster process of its tree is left behind.
    """
    started: list[Stack] = []

    def start(extra_env: Mapping[str, str] | None = None, *, var_dir: Path | None = None,
              wait: bool = True, fresh: bool = False) -> Stack:
        stack = launch(var_dir or tmp_path_factory.mktemp("var"), extra_env, wait=wait, fresh=fresh)
        started.append(stack)
        return stack

    yield start
    failures = []
    for stack in started:
        if stack.stopped or stack.process.poll() is not None:
            continue
        try:
            stack.stop()
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def postgres(request: pytest.FixtureRequest) -> Iterator[str]:
    """On the PostgreSQL pass: a database of the module's own on DATABASE_URL's server (its URL, for
    the module's stack to use); else "". Request it before the stack, so the stack stops first."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield ""
        return
    server = os.environ["DATABASE_URL"]
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_stack_")
    name = f"skald_{module}_{os.getpid()}"
    pg_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"' + template_clause())
    yield with_dbname(server, name)
    pg_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# For a module with a shared ``stack`` fixture of its own: its users, logged in once.


@pytest.fixture(scope="module")
def operator(stack: Stack) -> Api:
    return stack.api("operator")


@pytest.fixture(scope="module")
def approver(stack: Stack) -> Iterator[httpx.Client]:
    with stack.http(stack.token("approver")) as client:
        yield client


@pytest.fixture(scope="module")
def crash_db() -> Iterator[Database]:
    """The crash campaign's migrated template on this pass's database, its worker processes started
    from a pre-imported fork server."""
    with forked_children(), pass_database() as db:
        yield db
