"""``manage.py workspace_put SESSION_ID PATH [--from FILE]``: put a file into a session's workspace
(from FILE, or standard input), audited as the operator's CLI. For seeding a workspace before a
run, since the workspace lives in the database and no worker's disk is the truth."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.actors import Actor
from loop.errors import ToolError
from loop.models import Session
from skald.sessions.workspace import workspace_write


class Command(BaseCommand):
    help = "Write a file into a session workspace (audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_id", type=int)
        parser.add_argument("path", help="path inside the workspace, e.g. logs/app.log")
        parser.add_argument("--from", dest="source", type=Path, help="read the content from this file")

    def handle(self, *args: Any, session_id: int, path: str, source: Path | None, **options: Any) -> None:
        if not Session.objects.filter(pk=session_id).exists():
            raise CommandError(f"session {session_id} does not exist")
        data = source.read_bytes() if source is not None else sys.stdin.buffer.read()
        try:
            row = workspace_write(session_id=session_id, path=path, data=data, actor=Actor.system("cli"))
        except ToolError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{row.path}: {len(data)} bytes, version {row.version}")
