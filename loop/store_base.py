"""The store's core: construction, appending narrative rows, waking viewers after commit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import connection, transaction

from loop import rows
from loop.bounds import PAYLOAD_CAP_BYTES
from loop.digest import canonical
from loop.errors import PersistError
from loop.ports import AuditSink, Clock, EventBus


class StoreBase:
    """What every store write shares: the injected audit sink, clock and bus, and the one way a
    narrative row is appended."""

    def __init__(
        self, *, audit: AuditSink, clock: Clock, bus: EventBus, payload_cap: int = PAYLOAD_CAP_BYTES
    ) -> None:
        self.audit = audit
        self.clock = clock
        self.bus = bus
        self.payload_cap = payload_cap

    # --- narrative --------------------------------------------------------------------------

    def _append(
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
        assert connection.in_atomic_block, "narrative rows are appended inside a transaction"
        body = canonical(payload)
        if len(body.encode("utf-8")) > self.payload_cap:
            raise PersistError(
                f"{kind} payload is {len(body.encode())} bytes, over the {self.payload_cap}-byte cap",
                code="payload_too_large",
            )
        with connection.cursor() as cursor:
            seq, inserted = rows.append_event(cursor, session_id=session_id, exchange_id=exchange_id, kind=kind,
                                              narrative=narrative, body=body, key=key, created_at=self.clock.now())
            if seq is None:
                raise PersistError(f"session {session_id} does not exist", code="session_missing")
            if inserted:
                return seq
            # The key is stored already: an exact repeat returns that row, anything else refuses.
            rows.give_back_seq(cursor, session_id)
            existing = rows.find_event(cursor, key)
        assert existing is not None
        if existing[1] != kind or canonical(existing[2]) != body:
            raise PersistError(f"idempotency key {key} reused with other content", code="idempotency_conflict")
        return existing[0]

    def _wake(self, session_id: int, last_seq: int) -> None:
        """Wake the session's viewers once the transaction commits (never before: a viewer must
        find the rows it is woken for)."""
        transaction.on_commit(lambda: self.bus.committed(session_id, last_seq))

