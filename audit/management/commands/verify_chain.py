"""``manage.py verify_chain [--head FILE]``: exit 0 when the audit chain is intact, 1 when not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.services import chain_verify


class Command(BaseCommand):
    help = "Verify the hash-chained audit log; exit 1 naming the first bad seq."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--head",
            type=Path,
            help="a head exported by record_chain_head (JSON file): detects a truncation that "
            "also removed the recorded heads from the database",
        )

    def handle(self, *args: Any, head: Path | None = None, **options: Any) -> None:
        exported = None
        if head is not None:
            try:
                exported = json.loads(head.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot read head file {head}: {exc}") from exc
            if not isinstance(exported, dict):
                raise CommandError(f"head file {head} does not hold a JSON object")
        try:
            report = chain_verify(exported_head=exported)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if report.ok:
            rows = f"{report.rows} row" + ("" if report.rows == 1 else "s")
            self.stdout.write(f"audit chain intact: {rows}, head seq {report.tip_seq} {report.tip_hash}")
            return
        self.stderr.write(
            f"audit chain BROKEN at seq {report.first_bad_seq}: {report.reason} "
            f"({report.rows} rows examined; last good seq {report.tip_seq})"
        )
        # A plain exit status for cron and CI; call_command callers see SystemExit(1).
        raise SystemExit(1)
