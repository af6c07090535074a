"""``manage.py skald_sweeper``: hand out work nothing is doing, every ``SKALD_SWEEP_SECONDS``.

`make run` starts one beside the qcluster; a deployment may run one per machine (sweeps claim
everything they hand out, so any number of sweepers is safe). The django-q2 minute schedule
``skald.sweep`` is the fallback when none runs.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections

from skald.tasks import sweep


class Command(BaseCommand):
    help = "Re-enqueue pending work and recover exchanges whose lease lapsed (SPEC R2)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--once", action="store_true", help="sweep once and exit")

    def handle(self, *args: Any, once: bool = False, **options: Any) -> None:
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        signal.signal(signal.SIGINT, lambda *_: stopping.set())
        while True:
            close_old_connections()
            try:
                handed = sweep()
            except Exception as exc:  # noqa: BLE001 - the next sweep tries again; say why
                self.stderr.write(f"sweep failed: {exc!r}")
            else:
                if any(handed.values()):
                    self.stdout.write(f"sweep: {handed}")
            if once or stopping.wait(settings.SKALD_SWEEP_SECONDS):
                return
