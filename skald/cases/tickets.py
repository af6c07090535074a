"""The GDL launch's one input, the ticket: what the workflow API and the admin's launch form both
accept, checked in one place (SPEC W1)."""

from __future__ import annotations

from typing import Any

from skald.core.api.strict_input import refuse_unknown
from skald.core.errors import SkaldError

MAX_TICKET_BYTES = 8192
PROVIDER_FIELDS = frozenset({"provider", "model", "base_url", "api_key", "secret", "temperature"})


def parse_ticket(body: Any) -> str:
    """The body may hold ``ticket`` only: provider fields are refused as migrated."""
    if not isinstance(body, dict):
        raise SkaldError("The body must be a JSON object with a ticket.", code="gdl_ticket_invalid")
    migrated = sorted(k for k in body if k in PROVIDER_FIELDS or str(k).startswith("provider"))
    if migrated:
        raise SkaldError("Provider, model and secret are server-owned; the body may hold a ticket only.",
                         code="gdl_request_migrated", fields=migrated)
    refuse_unknown(body, {"ticket"})
    ticket = body.get("ticket")
    if not isinstance(ticket, str) or not ticket.strip():
        raise SkaldError("The ticket must be a non-empty string.", code="gdl_ticket_invalid")
    ticket = ticket.strip()
    if len(ticket.encode("utf-8")) > MAX_TICKET_BYTES:
        raise SkaldError(f"The ticket must be at most {MAX_TICKET_BYTES} bytes.", code="gdl_ticket_invalid")
    return ticket
