"""What the chain's PostgreSQL functions share across migrations: SQL run on PostgreSQL only (SQLite
needs none of it). The loader skips this module: its name starts with an underscore."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def postgres_only(create: str, drop: str) -> migrations.RunPython:
    """Run ``create`` on PostgreSQL when applied and ``drop`` when unapplied; nothing elsewhere."""

    def run(sql: str) -> Any:
        def apply(apps: Any, schema_editor: Any) -> None:
            if schema_editor.connection.vendor == "postgresql":
                schema_editor.execute(sql)

        return apply

    return migrations.RunPython(run(create), run(drop))
