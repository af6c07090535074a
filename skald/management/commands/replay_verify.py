"""``manage.py replay_verify RUN_ID``: print the replay-verify report as JSON; exit 0 when ok, 1 when not.

Recomputes from stored rows only; it never calls a provider.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from skald.core.errors import NotFound
from skald.crosscheck import replay_verify_run


class Command(BaseCommand):
    help = "Recompute a run's receipts and projection from stored rows; exit 1 on any mismatch."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=int, help="the run to verify")

    def handle(self, *args: Any, run_id: int, **options: Any) -> None:
        try:
            report = replay_verify_run(run_id=run_id)
        except NotFound as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps(report.as_dict(), sort_keys=True, indent=2))
        if not report.ok:
            # A plain exit status for cron and CI; call_command callers see SystemExit(1).
            raise SystemExit(1)
