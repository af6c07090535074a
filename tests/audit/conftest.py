"""Audit fixtures: a valid chain in the database, built with one bulk insert."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.conf import settings

from audit import chain
from audit.models import AuditEvent, ChainHead
from tests.audit.forge import chain_rows


@pytest.fixture
def audit_chain(db: None) -> Callable[..., list[AuditEvent]]:
    """``audit_chain(200, head_at=200)``: a valid chain in the database, one bulk insert."""

    def build(n: int, *, head_at: int | None = None) -> list[AuditEvent]:
        rows = chain_rows(n)
        events = AuditEvent.objects.bulk_create([AuditEvent(**fields) for fields in rows])
        if head_at is not None:
            head = rows[head_at - 1]
            # Signed as chain_head_record signs it: with a key configured, an unsigned head fails.
            key = settings.SKALD_AUDIT_KEY
            signature = chain.head_signature(key, seq=head["seq"], hash=head["hash"], recorded_at=head["time"]) \
                if key else ""
            ChainHead.objects.create(seq=head["seq"], hash=head["hash"], recorded_at=head["time"], signature=signature)
        return events

    return build
