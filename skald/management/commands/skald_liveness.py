"""``manage.py skald_liveness``: exit 1 when the workers are wedged, for a supervisor's health check.

The systemd watchdog timer and the Kubernetes liveness probe of a worker pod run it
(docs/production.md, "Supervision"): due work has waited ``SKALD_WORKERS_STALL_SECONDS`` and no
worker anywhere started a task in that time nor is busy with one. A database it cannot reach is
not the workers' fault: it exits 0 then, and readiness reports the database.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from skald.workers import workers_progress


class Command(BaseCommand):
    help = "Exit 1 when work is due and no worker started a task within SKALD_WORKERS_STALL_SECONDS."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            progress = workers_progress()
        except DatabaseError as exc:
            self.stderr.write(f"workers: unknown (database: {type(exc).__name__})")
            return
        if progress == "wedged":
            raise CommandError("workers: wedged", returncode=1)
        self.stdout.write(f"workers: {progress}")
