"""The store's narrative core: appending session-event rows, auditing, waking viewers after commit.

Every collaborator of :class:`~loop.store.Store` writes through one :class:`Journal`, which holds
the injected ports (audit sink, clock, bus) and the payload cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import transaction

from loop import sql
from loop.bounds import PAYLOAD_CAP_BYTES
from loop.digest import canonical
from loop.errors import LeaseLost, PayloadTooLarge, PersistError
from loop.ports import AuditSink, Clock, EventBus
from loop.sql import events
from loop.sql import exchanges as exchange_rows


class Journal:
    """Append-only narrative rows, exactly once by idempotency key, and audit rows beside them."""

    def __init__(
        self, *, audit: AuditSink, clock: Clock, bus: EventBus, payload_cap: int = PAYLOAD_CAP_BYTES,
        fence: tuple[int, str] | None = None,
    ) -> None:
        self.audit_sink = audit
        self.clock = clock
        self.bus = bus
        self.payload_cap = payload_cap
        # A driver's journal: (exchange id, claim token). Every row it appends to that exchange
        # checks, in the row's own transaction, that the claim is still its own (lease fencing).
        self.fence = fence

    def now(self) -> datetime:
        return self.clock.now()

    def audit(self, label: str, *, principal: str, subject_type: str, subject_id: object,
              payload: Mapping[str, Any]) -> None:
        """One audit row, inside the caller's transaction."""
        self.audit_sink.append(label, principal=principal, subject_type=subject_type, subject_id=str(subject_id),
                               payload=payload)

    def append(
        self,
        session_id: int,
        kind: str,
        payload: Mapping[str, Any],
        key: str,
        *,
        exchange_id: int | None = None,
        narrative: str = "",
    ) -> int:
        """Append one row inside the caller's transaction and return its seq. An exact repeat of
        ``key`` returns the stored row's seq; the same key with other content refuses."""
        assert sql.in_transaction(), "narrative rows are appended inside a transaction"
        body = canonical(payload)
        size = len(body.encode("utf-8"))
        if size > self.payload_cap:
            raise PayloadTooLarge(f"{kind} payload is {size} bytes, over the {self.payload_cap}-byte cap")
        with sql.cursor() as cursor:
            if self.fence is not None and exchange_id == self.fence[0] \
                    and not exchange_rows.holds_claim(cursor, exchange_id, self.fence[1]):
                raise LeaseLost(f"exchange {exchange_id}: another driver holds it now; nothing more is written")
            seq, inserted = events.append_event(cursor, session_id=session_id, exchange_id=exchange_id, kind=kind,
                                                narrative=narrative, body=body, key=key, created_at=self.now())
            if seq is None:
                raise PersistError(f"session {session_id} does not exist", code="session_missing")
            if inserted:
                return seq
            # The key is stored already: an exact repeat returns that row, anything else refuses.
            events.give_back_seq(cursor, session_id)
            existing = events.find_event(cursor, key)
        assert existing is not None
        if existing[1] != kind or canonical(existing[2]) != body:
            raise PersistError(f"idempotency key {key} reused with other content", code="idempotency_conflict")
        return existing[0]

    def wake(self, session_id: int, last_seq: int) -> None:
        """Wake the session's viewers once the transaction commits (never before: a viewer must
        find the rows it is woken for)."""
        transaction.on_commit(lambda: self.bus.committed(session_id, last_seq))
