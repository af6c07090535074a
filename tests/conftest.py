"""Shared fixtures: named people (alice the operator, bob the reviewer, carol the approver,
dave the auditor, charlie the outsider) and authenticated API clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import RefreshToken

from loop.providers.loopback import LoopbackProvider
from skald.core.roles import ROLE_PERMISSIONS, roles_ensure
from skald.core.var import var_dir_prepare
from skald.loop_adapters.runtime import set_provider_factory

PASSWORD = "correct horse battery staple"

# No per-example deadline: Hypothesis's default (200 ms) fails an example that a loaded machine
# merely ran slowly, and tests never judge by the clock (docs/testing.md).
hypothesis_settings.register_profile("skald", deadline=None)
hypothesis_settings.load_profile("skald")


def _roles_complete() -> bool:
    """Every role group holds every permission of its role: one query, where ``roles_ensure`` (a
    no-op then) makes some forty."""
    wanted = {(role.value, dotted) for role, names in ROLE_PERMISSIONS.items() for dotted in names}
    rows = Group.permissions.through.objects.filter(group__name__in={name for name, _ in wanted}).values_list(
        "group__name", "permission__content_type__app_label", "permission__codename")
    return wanted <= {(group, f"{app}.{codename}") for group, app, codename in rows}


def make_user(username: str, *roles: str, superuser: bool = False) -> User:
    if not _roles_complete():
        roles_ensure()  # transactional tests flush the groups the migration created
    user = User.objects.create_user(username=username, password=PASSWORD, is_superuser=superuser,
                                    is_staff=superuser or bool(roles))
    for role in roles:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def alice(db: None) -> User:
    return make_user("alice", "operator", "workflow")


@pytest.fixture
def bob(db: None) -> User:
    return make_user("bob", "reviewer")


@pytest.fixture
def carol(db: None) -> User:
    return make_user("carol", "approver")


@pytest.fixture
def dave(db: None) -> User:
    return make_user("dave", "auditor")


@pytest.fixture
def charlie(db: None) -> User:
    return make_user("charlie")


@pytest.fixture
def api() -> Callable[[User | None], APIClient]:
    """``api(user)`` → a client carrying that user's JWT; ``api(None)`` → anonymous."""

    def build(user: User | None) -> APIClient:
        client = APIClient()
        if user is not None:
            token = RefreshToken.for_user(user).access_token
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client

    return build


@pytest.fixture
def script() -> Iterator[Callable[..., LoopbackProvider]]:
    """``script(*turns, delay=…)`` → the one LoopbackProvider every agent of the test talks to."""

    def install(*turns: Any, delay: float = 0.0) -> LoopbackProvider:
        provider = LoopbackProvider(list(turns), delay=delay)
        set_provider_factory(lambda agent: provider)
        return provider

    yield install
    set_provider_factory(None)


@pytest.fixture(scope="session")
def django_db_keepdb(request: pytest.FixtureRequest, django_db_modify_db_settings: None) -> bool:
    """On SQLite, a worker's test database starts as a copy of the run's migrated template
    (``SKALD_TEST_SQLITE_TEMPLATE``, made once by ``skald/testrun.py``), which Django then keeps:
    its migrate finds nothing to apply. The copy is removed when the session ends."""
    import os
    import shutil

    from django.conf import settings

    if request.config.getvalue("reuse_db"):
        return True
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.postgresql":
        return _postgres_from_template(request, database)
    template = os.environ.get("SKALD_TEST_SQLITE_TEMPLATE", "")
    if not template or not Path(template).is_file() or database["ENGINE"] != "django.db.backends.sqlite3":
        return False
    name = Path(database["TEST"]["NAME"])  # with the xdist worker's suffix (django_db_modify_db_settings)
    shutil.copyfile(template, name)

    def remove() -> None:
        from django.db import connections

        connections.close_all()  # SQLite folds its WAL back and removes it as the last connection closes
        for path in (name, name.with_name(f"{name.name}-wal"), name.with_name(f"{name.name}-shm")):
            path.unlink(missing_ok=True)

    request.addfinalizer(remove)
    return True


def _postgres_from_template(request: pytest.FixtureRequest, database: dict[str, Any]) -> bool:
    """PostgreSQL's way: the worker's test database is created from the run's migrated template
    database (``SKALD_TEST_PG_TEMPLATE``) and dropped when the session ends."""
    import os

    from tests.e2e.crash import pg_admin

    template = os.environ.get("SKALD_TEST_PG_TEMPLATE", "")
    if not template:
        return False
    name = database["TEST"].get("NAME") or f"test_{database['NAME']}"  # with the xdist suffix
    server = os.environ["DATABASE_URL"]  # the pass's server (skald/testrun.py sets both)
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    pg_admin(server, drop, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')

    def remove() -> None:
        from django.db import connections

        connections.close_all()
        pg_admin(server, drop)

    request.addfinalizer(remove)
    return True


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    var_dir_prepare(Path(settings.VAR_DIR))  # settings write nothing; the SQLite test files live here
    # Real hashing costs ~0.3 s per user; the suite creates hundreds. Production keeps PBKDF2.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    _flush_postgres_by_delete()


def _flush_postgres_by_delete() -> None:
    """Transactional tests empty every table after each test (Django's ``flush``). On PostgreSQL that
    is one ``TRUNCATE`` of ~50 tables: new files for every table and index, 0.5-0.9 s of server time
    per test, most of the PostgreSQL pass. ``DELETE`` of the few rows a test leaves takes ~2 ms and
    empties the same tables in the same transaction (Django's foreign keys are deferrable, checked at
    commit). Sequences are reset as before when a test asks for it. Tests only: production never
    flushes."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush
    if getattr(truncate, "deletes", False):
        return

    def sql_flush(self: Any, style: Any, tables: list[str], *, reset_sequences: bool = False,
                  allow_cascade: bool = False) -> list[str]:
        if not tables:
            return []
        statements = ["SET CONSTRAINTS ALL DEFERRED;"]
        statements += [f"DELETE FROM {style.SQL_FIELD(self.quote_name(table))};" for table in tables]
        if reset_sequences:
            flushed = set(tables)
            sequences = [s for s in self.connection.introspection.sequence_list() if s["table"] in flushed]
            statements += self.sequence_reset_by_name_sql(style, sequences)
        return statements

    sql_flush.deletes = True  # type: ignore[attr-defined]
    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
