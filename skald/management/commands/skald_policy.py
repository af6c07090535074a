"""``manage.py skald_policy export|plan|apply|schema``: the governance configuration as code (issue 32).

- ``export [FILE]`` writes the live configuration as one YAML document (stdout without FILE).
- ``plan FILE [--json] [--days N | --no-impact]`` prints what applying FILE would change, its lint
  warnings and the impact on the last N days of recorded gate decisions (the changed calls with
  links to their admin pages); it changes nothing.
- ``apply FILE [--json] [--expect-digest D] [--actor USERNAME]`` makes the change in one transaction.
- ``schema`` prints the document's JSON Schema.

FILE ``-`` reads standard input. Exit status: 0 done, 2 the document is invalid (``policy_invalid``),
3 the live policy changed since the plan (``policy_changed``), 1 anything else refused. With
``--json`` an error is printed as ``{"code", "message", "extra"}`` on stdout, as the API renders it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from approvals.policy_doc.apply import policy_apply
from approvals.policy_doc.export import policy_export
from approvals.policy_doc.history import DEFAULT_DAYS
from approvals.policy_doc.parse import load_text, parse
from approvals.policy_doc.plan import policy_plan
from approvals.policy_doc.schema import policy_schema
from audit.actors import Actor
from skald.core.errors import SkaldError

EXIT_CODES = {"policy_invalid": 2, "policy_changed": 3}


def call_link(call_id: str) -> str:
    """The admin page of a recorded call (a path: the command does not know the public host)."""
    return reverse("admin:loop_toolcall_change", args=[call_id])


class Command(BaseCommand):
    help = "Export, plan or apply the governance configuration as one YAML document."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["export", "plan", "apply", "schema"])
        parser.add_argument("file", nargs="?", help="the document ('-': standard input); export: where to write")
        parser.add_argument("--json", action="store_true", help="print the plan or the result as JSON")
        parser.add_argument("--expect-digest", help="apply: refuse unless the live policy has this digest (from plan)")
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS,
                            help=f"plan: re-decide this many days of recorded calls (default {DEFAULT_DAYS})")
        parser.add_argument("--no-impact", action="store_true", help="plan: leave the impact preview out")
        parser.add_argument("--actor", help="apply: the username the audit rows name (default: system:policy)")

    def handle(self, *args: Any, action: str, file: str | None, **options: Any) -> None:
        if action == "schema":
            self.stdout.write(json.dumps(policy_schema(), indent=2))
            return
        if action == "export":
            text, digest = policy_export()
            if file in (None, "-"):
                self.stdout.write(text, ending="")
            else:
                Path(file).write_text(text, encoding="utf-8")
                self.stdout.write(f"Wrote {file} (digest {digest}).")
            return
        if file is None:
            raise CommandError(f"{action} needs a FILE (or '-' for standard input).")
        try:
            self._plan_or_apply(action, self._read(file), options)
        except SkaldError as exc:
            self._refused(exc, as_json=options["json"])

    def _read(self, file: str) -> str:
        if file == "-":
            return sys.stdin.read()
        try:
            return Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot read {file}: {exc.strerror}") from exc

    def _plan_or_apply(self, action: str, text: str, options: dict[str, Any]) -> None:
        doc = parse(load_text(text))
        if action == "plan":
            plan = policy_plan(doc, days=None if options["no_impact"] else options["days"])
            self._out(plan.as_dict(call_link) if options["json"] else plan.words(call_link), as_json=options["json"])
            return
        applied = policy_apply(actor=self._actor(options["actor"]), doc=doc, expect_digest=options["expect_digest"])
        words = [f"Applied {applied.digest} ({len(applied.changes)} changes; it was {applied.previous_digest})."]
        self._out(applied.as_dict() if options["json"] else words + [f"  {c.words()}" for c in applied.changes],
                  as_json=options["json"])

    def _actor(self, username: str | None) -> Actor:
        if not username:
            return Actor.system("policy")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user is named {username!r}.")
        return Actor.user(user)

    def _out(self, value: Any, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(value, indent=2, ensure_ascii=False))
        else:
            self.stdout.write("\n".join(value))

    def _refused(self, exc: SkaldError, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps({"code": exc.code, "message": exc.message, "extra": exc.extra}, indent=2,
                                         ensure_ascii=False))
        else:
            self.stderr.write(f"{exc.code}: {exc.message}")
            for problem in exc.extra.get("problems", []):
                self.stderr.write(f"  {problem['path']}: {problem['message']} ({problem['code']})")
        raise SystemExit(EXIT_CODES.get(exc.code, 1))
