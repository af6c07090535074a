"""The durable store (SPEC L4, L5): the only kernel module that touches the ORM.

Every method that changes state is one transaction that also appends its audit row through the
injected :class:`~loop.ports.AuditSink`; viewers are woken only after commit. Narrative rows are
append-only and exactly-once by idempotency key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from loop import rows
from loop.digest import canonical, events_digest
from loop.errors import HarnessError
from loop.events import CONVERSATION_KINDS, EventKind
from loop.models import (
    Exchange,
    ExchangeStatus,
    Frame,
    FrameStatus,
    Outcome,
    ScratchpadEntry,
    Session,
    SessionEvent,
)
from loop.projection import EventRow
from loop.providers.base import AssembledTurn
from loop.store_calls import CallWrites, ParsedCall, parse_arguments

ACTIVE_STATUSES = (ExchangeStatus.OPEN, ExchangeStatus.PARKED)


@dataclass(frozen=True, slots=True)
class Admission:
    exchange: Exchange
    replayed: bool



class Store(CallWrites):
    # --- sessions ---------------------------------------------------------------------------

    def create_session(self, *, owner_id: int, agent: str, source: str, title: str, principal: str) -> Session:
        with transaction.atomic():
            session = Session.objects.create(
                owner_id=owner_id, agent=agent, source=source, title=title[:200], created_at=self.clock.now()
            )
            self.audit.append(
                "loop.session.created", principal=principal, subject_type="session", subject_id=str(session.pk),
                payload={"agent": agent, "source": source},
            )
        return session

    def append_event(
        self,
        *,
        session_id: int,
        kind: str,
        payload: Mapping[str, Any],
        key: str,
        principal: str,
        exchange_id: int | None = None,
        narrative: str = "",
    ) -> SessionEvent:
        """Append a row on its own (notes, approval events from the product), audited."""
        with transaction.atomic():
            seq = self._append(session_id, kind, payload, key, exchange_id=exchange_id, narrative=narrative)
            self.audit.append(
                "loop.event.appended", principal=principal, subject_type="session", subject_id=str(session_id),
                payload={"seq": seq, "kind": kind, "digest": events_digest([(seq, kind, payload)])},
            )
            self._wake(session_id, seq)
        return SessionEvent.objects.get(session_id=session_id, seq=seq)

    def replay(
        self, session_id: int, *, narrative: str = "", cap: int, after_seq: int = 0
    ) -> tuple[list[EventRow], bool]:
        """The last ``cap`` conversation rows of a narrative (after ``after_seq``), oldest first, and
        whether older rows were cut off."""
        with connection.cursor() as cursor:
            fetched = rows.conversation_rows(cursor, session_id=session_id, narrative=narrative,
                                             kinds=CONVERSATION_KINDS, after_seq=after_seq, limit=cap + 1)
        capped = len(fetched) > cap
        window = [EventRow(seq=seq, kind=kind, payload=payload, narrative=narrative)
                  for seq, kind, payload in fetched[:cap]]
        window.reverse()
        return window, capped

    # --- exchanges ------------------------------------------------------------------------------

    def admit(
        self,
        *,
        session_id: int,
        request_key: str,
        content: str,
        principal: str,
        config: Mapping[str, Any],
        author: str = "",
        claim_token: str = "",
    ) -> Admission:
        """Admit a request idempotently (SPEC L4): an exact retry returns the stored exchange and
        writes nothing; another active exchange on the session refuses. With ``claim_token`` the
        new exchange is claimed in the same transaction (an in-process driver)."""
        try:
            with transaction.atomic():
                session = Session.objects.select_for_update().only("agent", "exchange_count").get(pk=session_id)
                clash = (Exchange.objects.filter(session_id=session_id)
                         .filter(Q(request_key=request_key) | Q(status__in=ACTIVE_STATUSES))
                         .order_by("-number").first())
                if clash is not None and clash.request_key == request_key:
                    return Admission(clash, replayed=True)
                if clash is not None:
                    code = "session_awaiting_human" if clash.status == ExchangeStatus.PARKED else "session_busy"
                    raise HarnessError(f"exchange e{clash.number} of this session is still {clash.status}", code=code)
                number = session.exchange_count + 1
                Session.objects.filter(pk=session_id).update(exchange_count=number)
                now = self.clock.now()
                exchange = Exchange.objects.create(
                    session_id=session_id, number=number, request_key=request_key, input=content,
                    status=ExchangeStatus.OPEN, config=dict(config), created_at=now,
                    budget_tokens=config.get("budget_tokens"), claim_token=claim_token,
                    claimed_at=now if claim_token else None,
                )
                exchange.root = Frame.objects.create(  # type: ignore[attr-defined]
                    session_id=session_id, exchange=exchange, depth=0, agent=session.agent, created_at=now
                )
                payload = {"content": content, "author": author}
                seq = self._append(session_id, EventKind.USER, payload, f"s{session_id}:e{number}:user",
                                   exchange_id=exchange.pk)
                self.audit.append(
                    "loop.exchange.admitted", principal=principal, subject_type="exchange",
                    subject_id=str(exchange.pk),
                    payload={"session": session_id, "number": number, "request_key": request_key,
                             "seq": seq, "digest": events_digest([(seq, EventKind.USER, payload)])},
                )
                self._wake(session_id, seq)
        except IntegrityError:
            # A concurrent admission with the same key won the race: this is an exact retry.
            existing = Exchange.objects.filter(session_id=session_id, request_key=request_key).first()
            if existing is None:
                raise
            return Admission(existing, replayed=True)
        return Admission(exchange, replayed=False)

    def claim(self, exchange_id: int, token: str) -> bool:
        """Claim an open exchange for one driver; a second driver gets False (no double driving).
        The driver that claimed it at admission keeps it."""
        with transaction.atomic():
            claimed = Exchange.objects.filter(pk=exchange_id, status=ExchangeStatus.OPEN).filter(
                Q(claim_token="") | Q(claim_token=token)
            ).update(claim_token=token, claimed_at=self.clock.now())
        return claimed == 1

    def reopen(self, exchange: Exchange, *, principal: str, reason: str) -> bool:
        """A parked exchange becomes open again (its approvals are answered) for a new driver."""
        with transaction.atomic():
            changed = Exchange.objects.filter(pk=exchange.pk, status=ExchangeStatus.PARKED).update(
                status=ExchangeStatus.OPEN, outcome="", claim_token=""
            )
            if changed:
                self.audit.append(
                    "loop.exchange.resumed", principal=principal, subject_type="exchange",
                    subject_id=str(exchange.pk), payload={"reason": reason},
                )
        return changed == 1

    def root_frame(self, exchange: Exchange) -> Frame:
        frame = getattr(exchange, "root", None)
        return frame if frame is not None else Frame.objects.get(exchange=exchange, depth=0)

    def request_cancel(self, exchange_id: int, *, principal: str) -> bool:
        """Record a stop request (sticky); the driving worker sees it within its poll interval."""
        with transaction.atomic():
            changed = Exchange.objects.filter(
                pk=exchange_id, cancel_requested_at__isnull=True, status__in=ACTIVE_STATUSES
            ).update(cancel_requested_at=self.clock.now())
            if changed:
                self.audit.append(
                    "loop.exchange.cancel_requested", principal=principal, subject_type="exchange",
                    subject_id=str(exchange_id), payload={},
                )
        return changed == 1

    def cancel_requested(self, exchange_id: int) -> bool:
        return Exchange.objects.filter(pk=exchange_id, cancel_requested_at__isnull=False).exists()

    # --- turns and tool calls ---------------------------------------------------------------------

    def finish_turn(
        self,
        *,
        exchange: Exchange,
        frame: Frame,
        turn: int,
        assembled: AssembledTurn,
        principal: str,
        spent_tokens: int,
        outcome: str,
        detail: Mapping[str, Any],
    ) -> dict[str, Any]:
        """A tool-free last turn: its message end and the settlement commit together."""
        with transaction.atomic():
            self._message_end(exchange, frame, turn, assembled, principal, spent_tokens)
            return self._settle(exchange, outcome=outcome, principal=principal, detail=detail)

    def settle(
        self, exchange: Exchange, *, outcome: str, principal: str, detail: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Settle a terminal outcome (RunEnd): the receipt certifies every write of the exchange.

        Updates ``exchange`` in place (status, outcome, receipt, counters).
        """
        with transaction.atomic():
            return self._settle(exchange, outcome=outcome, principal=principal, detail=detail)

    def _settle(
        self, exchange: Exchange, *, outcome: str, principal: str, detail: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        assert connection.in_atomic_block, "settle runs inside the caller's transaction"
        if outcome == Outcome.CANCELED:
            self._append(exchange.session_id, EventKind.CANCELED, {"reason": (detail or {}).get("reason", "")},
                         f"s{exchange.session_id}:e{exchange.number}:canceled", exchange_id=exchange.pk)
        # The end marker viewers follow: every outcome, not only the ones with a message.
        last = self._append(exchange.session_id, EventKind.EXCHANGE_SETTLED, {"outcome": outcome},
                            f"s{exchange.session_id}:e{exchange.number}:settled", exchange_id=exchange.pk)
        now = self.clock.now()
        with connection.cursor() as cursor:
            lock = " FOR UPDATE" if connection.vendor == "postgresql" else ""
            cursor.execute(f"SELECT turns, input_tokens, output_tokens FROM loop_exchange WHERE id = %s{lock}",
                           [exchange.pk])
            exchange.turns, exchange.input_tokens, exchange.output_tokens = cursor.fetchone()
            events = rows.exchange_events(cursor, exchange.pk)
            receipt = build_receipt(exchange, outcome=outcome, events=events, detail=detail or {})
            cursor.execute(
                "UPDATE loop_exchange SET status = %s, outcome = %s, receipt = " + rows.json_param()
                + ", claim_token = '', settled_at = %s WHERE id = %s",
                [ExchangeStatus.SETTLED, outcome, canonical(receipt), rows.when(now), exchange.pk],
            )
            cursor.execute(
                "UPDATE loop_frame SET status = %s, outcome = %s, closed_at = %s WHERE exchange_id = %s "
                "AND status = %s", [FrameStatus.CLOSED, outcome, rows.when(now), exchange.pk, FrameStatus.OPEN],
            )
        self.audit.append(
            "loop.exchange.settled", principal=principal, subject_type="exchange", subject_id=str(exchange.pk),
            payload={"outcome": outcome, "receipt_digest": receipt["digest"], "last_seq": receipt["last_seq"]},
        )
        self._wake(exchange.session_id, last)
        exchange.status, exchange.outcome, exchange.receipt = ExchangeStatus.SETTLED, outcome, receipt
        exchange.claim_token, exchange.settled_at = "", now
        return receipt

    def mark_broken(self, exchange: Exchange, *, code: str, message: str, principal: str) -> None:
        """A partial write or a breach: keep the claim and refuse retry (no silent repair, SPEC L5)."""
        with transaction.atomic():
            Exchange.objects.filter(pk=exchange.pk).update(status=ExchangeStatus.BROKEN, error_code=code[:64])
            self.audit.append(
                "loop.exchange.broken", principal=principal, subject_type="exchange", subject_id=str(exchange.pk),
                payload={"code": code, "message": message[:300]},
            )

    # --- scratchpad ---------------------------------------------------------------------------------

    def scratchpad_set(self, session_id: int, key: str, value: str, *, principal: str) -> None:
        with transaction.atomic():
            ScratchpadEntry.objects.update_or_create(
                session_id=session_id, key=key, defaults={"value": value, "updated_at": self.clock.now()}
            )
            self.audit.append(
                "loop.scratchpad.set", principal=principal, subject_type="session", subject_id=str(session_id),
                payload={"key": key, "bytes": len(value.encode("utf-8"))},
            )

    def scratchpad_get(self, session_id: int, key: str) -> str | None:
        return ScratchpadEntry.objects.filter(session_id=session_id, key=key).values_list("value", flat=True).first()


def build_receipt(
    exchange: Exchange, *, outcome: str, events: Sequence[tuple[int, str, Any]], detail: Mapping[str, Any]
) -> dict[str, Any]:
    """The receipt of a settled exchange; replay-verify recomputes it from the stored rows."""
    return {
        "exchange": exchange.pk,
        "session": exchange.session_id,
        "number": exchange.number,
        "request_key": exchange.request_key,
        "outcome": outcome,
        "turns": exchange.turns,
        "input_tokens": exchange.input_tokens,
        "output_tokens": exchange.output_tokens,
        "events": len(events),
        "first_seq": events[0][0] if events else None,
        "last_seq": events[-1][0] if events else None,
        "digest": events_digest(events),
        "detail": dict(detail),
    }


__all__ = ["Admission", "ParsedCall", "Store", "build_receipt", "parse_arguments"]
