"""Audit fixtures: a valid chain in the database, built with one bulk insert."""

from __future__ import annotations

from collections.abc import Callable

import pytest

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
            ChainHead.objects.create(seq=head["seq"], hash=head["hash"], recorded_at=head["time"])
        return events

    return build
