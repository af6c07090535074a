"""``manage.py verify_chain [--head FILE]``: exit 0 when the audit chain is intact, 1 when not.

Without ``--head`` the head exported to ``SKALD_CHAIN_HEAD_FILE`` (if any) is checked too. The
report names the newest head checked against and its age: a tail cut off after that head is the
one truncation no check can see (docs/audit-heads.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.heads import CheckedHead, chain_verify_with_head


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
            report, checked = chain_verify_with_head(exported_head=exported, exported_from=str(head or ""))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if report.ok:
            rows = f"{report.rows} row" + ("" if report.rows == 1 else "s")
            self.stdout.write(f"audit chain intact: {rows}, head seq {report.tip_seq} {report.tip_hash}")
            self.stdout.write(describe(checked))
            return
        self.stderr.write(
            f"audit chain BROKEN at seq {report.first_bad_seq}: {report.reason} "
            f"({report.rows} rows examined; last good seq {report.tip_seq})"
        )
        self.stderr.write(describe(checked))
        # A plain exit status for cron and CI; call_command callers see SystemExit(1).
        raise SystemExit(1)


def describe(checked: CheckedHead | None) -> str:
    """One line naming the head checked against, its source and age."""
    if checked is None:
        return "checked against no recorded head: a truncated tail would go unnoticed (docs/audit-heads.md)"
    age = "age unknown" if checked.age is None else f"{int(checked.age.total_seconds())} s old"
    signed = "signed" if checked.signed else "unsigned"
    return (f"checked against head seq {checked.seq} ({signed}, {checked.source}, recorded {checked.recorded_at}, "
            f"{age})")
