"""``manage.py record_chain_head``: record the audit chain's head and print it as JSON.

Store the printed JSON somewhere the database's writers cannot reach; ``verify_chain --head``
checks the chain against it later.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.actors import Actor
from audit.services import chain_head_export, chain_head_record


class Command(BaseCommand):
    help = "Record the audit chain head (HMAC-signed when SKALD_AUDIT_KEY is set) and print it as JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--actor",
            default="system:record_chain_head",
            help='who records it, as a principal ("system:cron", "user:42"); default %(default)s',
        )

    def handle(self, *args: Any, actor: str, **options: Any) -> None:
        try:
            principal = Actor.parse(actor)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        head = chain_head_record(actor=principal)
        self.stdout.write(json.dumps(chain_head_export(head=head), sort_keys=True))
