"""The store's exchange writes: admission, claims, stop requests, parking, settlement (SPEC L4, L5).

Each write is one transaction with its audit row; viewers are woken after commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction

from loop import sql
from loop.bounds import DEFAULT_LEASE_SECONDS
from loop.digest import canonical, events_digest
from loop.errors import SessionAwaitingHuman, SessionBusy
from loop.events import EventKind
from loop.journal import Journal
from loop.models import Exchange, ExchangeStatus, Frame, Outcome, ToolCall, ToolCallStatus
from loop.outcomes import Canceled, TerminalOutcome, build_receipt, outcome_detail
from loop.providers.base import AssembledTurn
from loop.sql import exchanges as rows
from loop.store_calls import CallLog, ParsedCall


@dataclass(frozen=True, slots=True)
class Admission:
    exchange: Exchange
    replayed: bool


@dataclass(frozen=True, slots=True)
class Ledger:
    """What an exchange's dispatch authority spent, saved when the exchange stops dispatching."""

    reserved_tokens: int
    accounting_incomplete: bool


class ExchangeLog:
    """Exchange rows through their life: open → (parked → open)* → settled | broken."""

    def __init__(self, journal: Journal, calls: CallLog, *, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        self.journal = journal
        self.calls = calls
        self.lease_seconds = lease_seconds
        self.lease = timedelta(seconds=lease_seconds)

    def _lease_until(self) -> datetime:
        return self.journal.now() + self.lease

    # --- admission and claims ---------------------------------------------------------------------

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
        traceparent: str = "",
    ) -> Admission:
        """Admit a request idempotently (SPEC L4): an exact retry returns the stored exchange and
        writes nothing; another active exchange on the session refuses (:class:`SessionBusy`,
        :class:`SessionAwaitingHuman`). With ``claim_token`` the new exchange is claimed in the same
        transaction (an in-process driver)."""
        for attempt in range(3):
            try:
                exchange = self._insert(session_id=session_id, request_key=request_key, content=content,
                                        principal=principal, config=config, author=author, claim_token=claim_token,
                                        traceparent=traceparent)
            except IntegrityError:
                # An exchange with this key exists (an exact retry, perhaps a concurrent one that won
                # the race) or another exchange of the session is active; nothing was written.
                clash = rows.admission_clash(session_id, request_key)
                if clash is None and attempt < 2:
                    continue  # the clash ended in between (the active exchange settled): admit again
                if clash is None:
                    raise
                if clash.request_key == request_key:
                    return Admission(clash, replayed=True)
                refusal = SessionAwaitingHuman if clash.status == ExchangeStatus.PARKED else SessionBusy
                raise refusal(f"exchange e{clash.number} of this session is still {clash.status}") from None
            return Admission(exchange, replayed=False)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _insert(self, *, session_id: int, request_key: str, content: str, principal: str, config: Mapping[str, Any],
                author: str, claim_token: str, traceparent: str = "") -> Exchange:
        """The new exchange, its user row and audit row in one transaction. Nothing is looked up
        first: the constraints refuse a repeated request key and a second active exchange of the
        session (``IntegrityError``), so a fresh admission costs no query for them."""
        with self.journal.batch():
            session = rows.lock_session(session_id)
            self.journal.seed_seq(session_id, session.last_seq)
            now = self.journal.now()
            exchange = rows.create_exchange(session, request_key=request_key, content=content, config=config,
                                            claim_token=claim_token, now=now, lease_until=now + self.lease,
                                            traceparent=traceparent)
            self.journal.set_session_counter(session_id, "exchange_count", exchange.number)
            payload = {"content": content, "author": author}
            seq = self.journal.append(session_id, EventKind.USER, payload, f"s{session_id}:e{exchange.number}:user",
                                      exchange_id=exchange.pk, fresh=True)  # the exchange number is new
            self.journal.audit(
                "loop.exchange.admitted", principal=principal, subject_type="exchange", subject_id=exchange.pk,
                payload={"session": session_id, "number": exchange.number, "request_key": request_key,
                         "seq": seq, "digest": events_digest([(seq, EventKind.USER, payload)])},
            )
            self.journal.wake(session_id, seq)
        return exchange

    def find(self, session_id: int, request_key: str) -> Exchange | None:
        return rows.exchange_by_key(session_id, request_key)

    def get(self, exchange_id: int) -> Exchange:
        return rows.exchange_by_id(exchange_id)

    def claim(self, exchange_id: int, token: str) -> bool:
        """Claim an open exchange for one driver; a second driver gets False (no double driving).
        The driver that claimed it at admission keeps it. The claim is a lease (see :meth:`renew`)."""
        with transaction.atomic():
            return rows.claim(exchange_id, token, self.journal.now(), self._lease_until())

    def claim_first(self, exchange_id: int, token: str) -> bool:
        """Claim an open exchange that no driver ever claimed: its task's first delivery. Nothing of it
        has run, so there is nothing to recover (no audit row of a resumption either)."""
        with transaction.atomic():
            return rows.claim(exchange_id, token, self.journal.now(), self._lease_until(), first=True)

    def claim_for_recovery(self, exchange_id: int, token: str, *, principal: str, reason: str = "recovery") -> bool:
        """Claim an active (open or parked) exchange that no live driver holds: unclaimed, or its
        lease lapsed. Recovery and resolvers claim exactly like a live turn, so two never drive
        one exchange together."""
        with transaction.atomic():
            now = self.journal.now()
            taken = rows.claim(exchange_id, token, now, now + self.lease,
                               statuses=(ExchangeStatus.OPEN, ExchangeStatus.PARKED), take_lapsed=True)
            if taken:
                self.journal.audit("loop.exchange.resumed", principal=principal, subject_type="exchange",
                                   subject_id=exchange_id, payload={"reason": f"claimed: {reason}"})
        return taken

    def renew(self, exchange_id: int, token: str) -> bool:
        """Extend the lease while driving; False when the claim was lost (stop driving)."""
        return rows.renew(exchange_id, token, self._lease_until())

    def release(self, exchange_id: int, token: str) -> bool:
        """Give a claim back without settling (a resolver that leaves the exchange parked)."""
        return rows.release(exchange_id, token)

    def needing_recovery(self, *, unclaimed_for: float, limit: int = 100) -> list[int]:
        """Active exchanges no live driver holds (see :func:`loop.sql.exchanges.needing_recovery`)."""
        now = self.journal.now()
        return rows.needing_recovery(now, unclaimed_before=now - timedelta(seconds=unclaimed_for), limit=limit)

    def stranded(self, exchange_id: int, *, unclaimed_for: float) -> bool:
        now = self.journal.now()
        return rows.is_stranded(exchange_id, now, unclaimed_before=now - timedelta(seconds=unclaimed_for))

    def active(self, session_id: int) -> Exchange | None:
        return rows.active_exchange(session_id)

    def reopen(self, exchange: Exchange, *, principal: str, reason: str, token: str = "") -> bool:
        """A parked exchange becomes open again (its approvals are answered), held by ``token``."""
        with transaction.atomic():
            changed = rows.reopen(exchange.pk, token)
            if changed:
                self.journal.audit("loop.exchange.resumed", principal=principal, subject_type="exchange",
                                   subject_id=exchange.pk, payload={"reason": reason})
        return changed

    def root_frame(self, exchange: Exchange) -> Frame:
        frame = getattr(exchange, "root", None)
        return frame if frame is not None else rows.root_frame(exchange.pk)

    # --- stop ---------------------------------------------------------------------------------------

    def request_cancel(self, exchange_id: int, *, principal: str) -> bool:
        """Record a stop request (sticky); the driving worker sees it within its poll interval."""
        with transaction.atomic():
            changed = rows.request_cancel(exchange_id, self.journal.now())
            if changed:
                self.journal.audit("loop.exchange.cancel_requested", principal=principal, subject_type="exchange",
                                   subject_id=exchange_id, payload={})
        return changed

    def cancel_requested(self, exchange_id: int) -> bool:
        return rows.cancel_requested(exchange_id)

    def return_reserved(self, exchange_id: int, tokens: int) -> None:
        """Credit ``tokens`` a task reserved from this exchange's ledger and did not spend, inside
        the caller's transaction (the task's ending: so exactly once)."""
        assert sql.in_transaction(), "a return commits with the task's ending"
        if tokens > 0:
            rows.add_returned(exchange_id, tokens)

    def returned(self, exchange_id: int) -> int:
        """What tasks gave back to this exchange's ledger so far."""
        return rows.returned(exchange_id)

    def release_thread(self) -> None:
        """A watcher thread that polled these rows ends: close its connections (the stop watcher's
        source is this part: ``cancel_requested``, ``renew``, ``lease_seconds``)."""
        sql.release_thread()

    # --- parking --------------------------------------------------------------------------------------

    def park(
        self,
        exchange: Exchange,
        parked: Sequence[tuple[ToolCall, Callable[[], Mapping[str, Any]]]],
        *,
        principal: str,
        question: str = "",
    ) -> None:
        """Park calls awaiting a human (SPEC A3): each ``park`` callback writes its durable approval
        in this same transaction; the exchange ends AwaitingHuman and no worker waits."""
        with transaction.atomic():
            keys = []
            for call, park in parked:
                detail = dict(park())
                self.calls.transition(call, ToolCallStatus.AWAITING_HUMAN, principal=principal, extra={})
                self.journal.append(
                    call.session_id, EventKind.APPROVAL_REQUESTED,
                    {"key": call.call_key, "name": call.tool, "tool_call_id": call.pk, **detail},
                    f"s{call.session_id}:{call.call_key}:approval:{call.updated_at.timestamp()}",
                    exchange_id=exchange.pk,
                )
                keys.append(call.call_key)
            seq = self.journal.append(
                exchange.session_id, EventKind.EXCHANGE_PARKED, {"calls": keys, "question": question},
                f"s{exchange.session_id}:e{exchange.number}:parked:{len(keys)}:{self.journal.now().timestamp()}",
                exchange_id=exchange.pk,
            )
            rows.mark_parked(exchange.pk)  # last: it lets go of the claim the rows above are fenced by
            self.journal.audit("loop.exchange.parked", principal=principal, subject_type="exchange",
                               subject_id=exchange.pk, payload={"calls": keys, "question": question[:500]})
            self.journal.wake(exchange.session_id, seq)
        exchange.status, exchange.outcome, exchange.claim_token = ExchangeStatus.PARKED, Outcome.AWAITING_HUMAN, ""

    # --- endings --------------------------------------------------------------------------------------

    def record_message_end(
        self, *, exchange: Exchange, frame: Frame, turn: int, assembled: AssembledTurn, principal: str,
        spent_tokens: int, journal: int = 0,
    ) -> list[tuple[ToolCall, ParsedCall]]:
        """Persist the assistant turn and its planned calls (message end, SPEC L1).

        ``journal`` calls (the first ones of the round) also get their ``control:tool_intent`` in
        this transaction: nothing happens between the message end and their intent but the gate.
        """
        with self.journal.batch():
            calls = self.calls.message_end(exchange, frame, turn, assembled, principal, spent_tokens)
            for call, _parsed in calls[:journal]:
                self.calls.intent(call, principal=principal, narrative=frame.narrative)
        return calls

    def finish_turn(
        self, *, exchange: Exchange, frame: Frame, turn: int, assembled: AssembledTurn, principal: str,
        spent_tokens: int, outcome: TerminalOutcome,
    ) -> dict[str, Any]:
        """A tool-free last turn: its message end and the settlement commit together."""
        with self.journal.batch():
            self.calls.message_end(exchange, frame, turn, assembled, principal, spent_tokens)
            return self._settle(exchange, outcome, principal=principal, ledger=None)

    def settle(
        self, exchange: Exchange, outcome: TerminalOutcome, *, principal: str, ledger: Ledger | None = None
    ) -> dict[str, Any]:
        """Settle a terminal outcome (RunEnd): the receipt certifies every write of the exchange.

        ``ledger`` saves the dispatch authority's spend in the same transaction (a settlement that
        no message end preceded). Updates ``exchange`` in place (status, outcome, receipt, counters).
        """
        with self.journal.batch():
            return self._settle(exchange, outcome, principal=principal, ledger=ledger)

    def _settle(
        self, exchange: Exchange, outcome: TerminalOutcome, *, principal: str, ledger: Ledger | None
    ) -> dict[str, Any]:
        assert sql.in_transaction(), "settle runs inside the caller's transaction"
        if ledger is not None:  # audited below, in the settlement's own row
            rows.save_ledger(exchange.pk, reserved_tokens=ledger.reserved_tokens,
                             accounting_incomplete=ledger.accounting_incomplete)
            if ledger.accounting_incomplete:
                self.journal.audit("policy.budget.accounting_incomplete", principal=principal,
                                   subject_type="exchange", subject_id=exchange.pk,
                                   payload={"reserved_tokens": ledger.reserved_tokens})
        if isinstance(outcome, Canceled):
            # ``cause`` is what a viewer branches on (a withdrawn task's card reads differently).
            self.journal.append(exchange.session_id, EventKind.CANCELED,
                                {"reason": outcome.reason, "cause": outcome.cause.value},
                                f"s{exchange.session_id}:e{exchange.number}:canceled", exchange_id=exchange.pk)
        # The end marker viewers follow: every outcome, not only the ones with a message.
        last = self.journal.append(exchange.session_id, EventKind.EXCHANGE_SETTLED, {"outcome": outcome.name},
                                   f"s{exchange.session_id}:e{exchange.number}:settled", exchange_id=exchange.pk,
                                   fresh=True)  # written once, with the settlement
        now = self.journal.now()
        self.journal.flush_rows()  # the receipt reads every row of the exchange back
        with sql.cursor() as cursor:
            counters, events = rows.counters_and_events(cursor, exchange.pk)
        exchange.turns, exchange.input_tokens, exchange.output_tokens = counters
        receipt = build_receipt(exchange, outcome=outcome.name, events=events, detail=outcome_detail(outcome))
        for write in rows.mark_settled(exchange.pk, outcome=outcome.name, receipt=canonical(receipt), now=now):
            self.journal.write(write)
        self.journal.audit(
            "loop.exchange.settled", principal=principal, subject_type="exchange", subject_id=exchange.pk,
            payload={"outcome": outcome.name, "receipt_digest": receipt["digest"], "last_seq": receipt["last_seq"],
                     **({"ledger": {"reserved_tokens": ledger.reserved_tokens,
                                    "accounting_incomplete": ledger.accounting_incomplete}} if ledger else {})},
        )
        self.journal.wake(exchange.session_id, last)
        exchange.status, exchange.outcome, exchange.receipt = ExchangeStatus.SETTLED, outcome.name, receipt
        exchange.claim_token, exchange.settled_at = "", now
        return receipt

    def mark_broken(self, exchange: Exchange, *, code: str, message: str, principal: str) -> None:
        """A partial write or a breach: keep the claim and refuse retry (no silent repair, SPEC L5)."""
        with transaction.atomic():
            rows.mark_broken(exchange.pk, code)
            self.journal.audit("loop.exchange.broken", principal=principal, subject_type="exchange",
                               subject_id=exchange.pk, payload={"code": code, "message": message[:300]})
        exchange.status, exchange.error_code = ExchangeStatus.BROKEN, code[:64]
