"""``manage.py sign_chain_heads``: sign the heads recorded before ``SKALD_AUDIT_KEY`` was configured.

Verifies the chain first and refuses, signing nothing, when it is broken, when a head's signature is
invalid, or when an unsigned head is newer than a signed one (docs/audit-heads.md).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.actors import Actor
from audit.heads import chain_heads_sign
from skald.core.errors import SkaldError


class Command(BaseCommand):
    help = "Sign the audit chain heads recorded before SKALD_AUDIT_KEY existed (verifies the chain first)."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            signed = chain_heads_sign(actor=Actor.system("sign_chain_heads"))
        except SkaldError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        if not signed:
            self.stdout.write("every recorded head is already signed")
            return
        self.stdout.write(f"signed {len(signed)} head(s): seq {', '.join(map(str, signed))}")
