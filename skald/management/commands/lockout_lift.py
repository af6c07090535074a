"""``manage.py lockout_lift [--username NAME] [--address IP]``: lift sign-in lockouts from a shell
(break-glass: when every administrator is locked out). Audited like a lift in the admin, with the
actor ``system:manage``."""

from __future__ import annotations

from typing import Any

from axes.models import AccessAttempt
from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.actors import Actor
from skald.identity.lockout import lockout_lift


class Command(BaseCommand):
    help = "Lift the sign-in lockouts of an account name and/or a client address (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="", help="the account name whose failures are forgotten")
        parser.add_argument("--address", default="", help="the client address whose failures are forgotten")

    def handle(self, *args: Any, username: str, address: str, **options: Any) -> None:
        if not username and not address:
            raise CommandError("name --username and/or --address")
        attempts = AccessAttempt.objects.all()
        if username:
            attempts = attempts.filter(username=username)
        if address:
            attempts = attempts.filter(ip_address=address)
        lifted = lockout_lift(actor=Actor.system("manage"), attempts=list(attempts))
        self.stdout.write(f"lifted {lifted} lockout record(s)")
