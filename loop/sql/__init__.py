"""Every query of the kernel's store, in one package (nothing else in ``loop`` queries the database).

The hot path is hand-written SQL (building those statements through the ORM cost more than
running them); the rest uses the ORM. The functions run inside the store's transactions and speak
both SQLite and PostgreSQL. ``loop.store`` and its collaborators are their only callers.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection, connections
from django.db.backends.utils import CursorWrapper


def json_param() -> str:
    return "%s::jsonb" if connection.vendor == "postgresql" else "%s"


def load_json(value: Any) -> Any:
    """A JSON column as read by a raw cursor: text on SQLite (and Django's psycopg), else decoded."""
    return json.loads(value) if isinstance(value, str | bytes | bytearray) else value


def when(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def for_update() -> str:
    """Row locks exist on PostgreSQL; SQLite serialises writers anyway."""
    return " FOR UPDATE" if connection.vendor == "postgresql" else ""


def in_transaction() -> bool:
    return connection.in_atomic_block


def cursor() -> CursorWrapper:
    """A raw cursor for a batch of the hand-written statements, inside the caller's transaction."""
    return connection.cursor()


def release_thread() -> None:
    """Close this thread's database connections (a helper thread that is about to end)."""
    connections.close_all()
