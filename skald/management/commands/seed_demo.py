from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from skald.demo import DEMO_USERS, demo_mcp_ensure, seed_demo


class Command(BaseCommand):
    help = "Seed the demo users, case and agents (idempotent) and print the logins."

    def handle(self, *args: Any, **options: Any) -> None:
        report = seed_demo(password=settings.SKALD_DEMO_PASSWORD or None)
        origin = "from SKALD_DEMO_PASSWORD" if report.password_from_env else "default; set SKALD_DEMO_PASSWORD"
        self.stdout.write("Logins (password " + origin + "):")
        self.stdout.write(f"  admin      {report.password}   superuser")
        for username, roles in DEMO_USERS.items():
            self.stdout.write(f"  {username:<10} {report.password}   roles: {', '.join(roles)}")
        if not report.created_users:
            self.stdout.write("  (users existed already; passwords unchanged unless SKALD_DEMO_PASSWORD is set)")
        self.stdout.write(f"Demo case: #{report.case_id}")
        self.stdout.write(demo_mcp_ensure())
