"""Replay-verify: recompute a session's receipts and projection from stored rows (SPEC L5, L6).

"Verify, don't re-run": everything here is recomputed from stored columns. No provider is ever
built or called; the projection is :func:`loop.projection.project`, the pure function.

What is checked, for one session:

* **receipts** — each settled exchange's receipt is rebuilt with :func:`loop.store.build_receipt`
  over its events as they are stored now (digest, event count, first/last seq, turns, tokens,
  outcome …) and compared field by field with the stored receipt;
* **settlement audit** — the ``receipt_digest`` and ``last_seq`` the ``loop.exchange.settled``
  audit row recorded equal the stored receipt's (catches a receipt rewritten to fit edited rows);
* **event audit** — every audit row that names an event by ``seq`` (admitted, turn ended, tool-call
  transition, event appended) still finds that event, in that exchange, with the digest it
  recorded (intent rows, audited without a digest, are compared key by key);
* **sequence** — the session's seqs are exactly ``1..last_seq`` and exchange numbers ``1..n``;
* **projection** — each narrative's conversation rows project without a refusal, one window per
  compaction (rows of a still open or parked exchange are left out: their tool group may be open).

Trust boundary: the audit rows are taken as recorded; ``verify_chain`` is what proves them intact.
Events audited by no digest (``control:tool_done``, approval and parking rows) are covered by the
receipt digest once their exchange settles, and only by the sequence check before.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.digest import events_digest
from loop.events import CONVERSATION_KINDS, EventKind
from loop.models import Exchange, ExchangeStatus, Session, SessionEvent, ToolCall
from loop.projection import EventRow, ProjectionError, project
from loop.store import build_receipt
from skald.core.errors import NotFound
from skald.models import Run

# Every receipt field rebuilt from stored rows; ``detail`` (the answer, a reason) is not derivable.
RECEIPT_FIELDS = (
    "exchange", "session", "number", "request_key", "outcome", "turns", "input_tokens", "output_tokens",
    "events", "first_seq", "last_seq", "digest",
)  # fmt: skip
# Audit rows that name a session event by ``seq``.
_EVENT_AUDIT_KINDS = (
    AuditKind.EXCHANGE_ADMITTED, AuditKind.TURN_ENDED, AuditKind.TOOL_CALL_TRANSITION, AuditKind.EVENT_APPENDED,
)  # fmt: skip
_ACTIVE = (ExchangeStatus.OPEN, ExchangeStatus.PARKED)
_MISSING_SEQS_LISTED = 20


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The outcome of a replay-verify.

    Attributes:
        ok: no mismatch was found.
        exchanges: exchanges of the session (settled or not).
        events: session events checked.
        mismatches: one dict per finding; always ``exchange``, ``number`` (``None`` for
            session-level findings) and ``field``, then ``stored``/``recomputed`` or ``audited``
            values, ``seq``/``audit_seq`` when an event or an audit row is named, or ``error``.
    """

    ok: bool
    exchanges: int
    events: int
    mismatches: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "exchanges": self.exchanges, "events": self.events, "mismatches": self.mismatches}


@dataclass(frozen=True, slots=True)
class _Event:
    seq: int
    kind: str
    payload: Any
    exchange_id: int | None
    narrative: str


@dataclass(frozen=True, slots=True)
class _Audit:
    seq: int
    kind: int
    subject_type: str
    subject_id: str
    payload: dict[str, Any]
    exchange_id: int | None  # the exchange the subject belongs to (an exchange, a tool call), else None


def replay_verify_run(*, run_id: int) -> ReplayReport:
    """Replay-verify the session of run ``run_id`` (what the API, the command and the admin call).

    Raises:
        NotFound: ``run_not_found``.
    """
    session_id = Run.objects.filter(pk=run_id).values_list("session_id", flat=True).first()
    if session_id is None:
        raise NotFound(f"Run {run_id} does not exist.", code="run_not_found")
    return replay_verify_session(session_id=session_id)


def replay_verify_session(*, session_id: int) -> ReplayReport:
    """Recompute receipts, audit digests, seq contiguity and the projection of one session.

    Raises:
        NotFound: ``session_not_found``.
    """
    session = Session.objects.filter(pk=session_id).values("last_seq", "exchange_count").first()
    if session is None:
        raise NotFound(f"Session {session_id} does not exist.", code="session_not_found")
    exchanges = list(Exchange.objects.filter(session_id=session_id).order_by("number"))
    events = [
        _Event(*row)
        for row in SessionEvent.objects.filter(session_id=session_id)
        .order_by("seq")
        .values_list("seq", "kind", "payload", "exchange_id", "narrative")
    ]
    audits = _audit_rows(session_id, [e.pk for e in exchanges])

    mismatches = _sequence_mismatches(events, last_seq=session["last_seq"])
    mismatches += _numbering_mismatches(exchanges, exchange_count=session["exchange_count"])
    mismatches += _receipt_mismatches(exchanges, events, audits)
    mismatches += _event_audit_mismatches(exchanges, events, audits)
    mismatches += _projection_mismatches(exchanges, events)
    return ReplayReport(ok=not mismatches, exchanges=len(exchanges), events=len(events), mismatches=mismatches)


def _audit_rows(session_id: int, exchange_ids: Sequence[int]) -> list[_Audit]:
    owners = {
        ("tool_call", str(pk)): exchange_id
        for pk, exchange_id in ToolCall.objects.filter(session_id=session_id).values_list("pk", "exchange_id")
    }
    owners.update({("exchange", str(pk)): pk for pk in exchange_ids})
    subjects = (
        Q(subject_type="exchange", subject_id__in=[str(pk) for pk in exchange_ids])
        | Q(subject_type="tool_call", subject_id__in=[sid for st, sid in owners if st == "tool_call"])
        | Q(subject_type="session", subject_id=str(session_id))
    )
    rows = (
        AuditEvent.objects.filter(subjects, kind__in=[*_EVENT_AUDIT_KINDS, AuditKind.EXCHANGE_SETTLED])
        .order_by("seq")
        .values_list("seq", "kind", "subject_type", "subject_id", "payload")
    )
    return [
        _Audit(seq, kind, st, sid, _json_object(payload), owners.get((st, sid)))
        for seq, kind, st, sid, payload in rows
    ]


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _finding(exchange: Exchange | None, field: str, **values: Any) -> dict[str, Any]:
    return {
        "exchange": exchange.pk if exchange is not None else None,
        "number": exchange.number if exchange is not None else None,
        "field": field,
        **values,
    }


def _sequence_mismatches(events: Sequence[_Event], *, last_seq: int) -> list[dict[str, Any]]:
    """Seqs must be exactly ``1..last_seq``: a deleted row leaves a gap, an inserted one an excess."""
    missing: list[int] = []
    missing_count = 0
    duplicates: list[int] = []
    expected = 1
    for event in events:
        if event.seq < expected:
            duplicates.append(event.seq)
            continue
        if event.seq > expected:
            missing_count += event.seq - expected
            missing += range(expected, min(event.seq, expected + _MISSING_SEQS_LISTED - len(missing)))
        expected = event.seq + 1
    beyond = [e.seq for e in events if e.seq > last_seq]
    if expected <= last_seq:
        missing_count += last_seq + 1 - expected
        missing += range(expected, min(last_seq + 1, expected + _MISSING_SEQS_LISTED - len(missing)))
    found: list[dict[str, Any]] = []
    if missing_count:
        found.append(_finding(None, "seq", error="gap", missing=missing[:_MISSING_SEQS_LISTED],
                              missing_count=missing_count, last_seq=last_seq))
    if duplicates:
        found.append(_finding(None, "seq", error="duplicate", duplicates=duplicates[:_MISSING_SEQS_LISTED]))
    if beyond:
        found.append(_finding(None, "seq", error="beyond last_seq", beyond=beyond[:_MISSING_SEQS_LISTED],
                              last_seq=last_seq))
    return found


def _numbering_mismatches(exchanges: Sequence[Exchange], *, exchange_count: int) -> list[dict[str, Any]]:
    numbers = [e.number for e in exchanges]
    expected = list(range(1, exchange_count + 1))
    if numbers == expected:
        return []
    return [_finding(None, "exchange_numbers", stored=exchange_count, recomputed=numbers[:100])]


def _receipt_mismatches(
    exchanges: Sequence[Exchange], events: Sequence[_Event], audits: Sequence[_Audit]
) -> list[dict[str, Any]]:
    by_exchange: dict[int, list[tuple[int, str, Any]]] = defaultdict(list)
    for event in events:
        if event.exchange_id is not None:
            by_exchange[event.exchange_id].append((event.seq, event.kind, event.payload))
    settled_audits: dict[str, list[_Audit]] = defaultdict(list)
    for row in audits:
        if row.kind == AuditKind.EXCHANGE_SETTLED:
            settled_audits[row.subject_id].append(row)

    found: list[dict[str, Any]] = []
    for exchange in exchanges:
        if exchange.status != ExchangeStatus.SETTLED:
            continue  # parked, open or broken: no receipt yet; its events are still checked against audit
        stored = exchange.receipt
        if not isinstance(stored, dict):
            found.append(_finding(exchange, "receipt", stored=stored, error="a settled exchange has no receipt"))
            continue
        recomputed = build_receipt(exchange, outcome=exchange.outcome, events=by_exchange[exchange.pk],
                                   detail=stored.get("detail") or {})
        for name in RECEIPT_FIELDS:
            if stored.get(name) != recomputed[name]:
                found.append(_finding(exchange, name, stored=stored.get(name), recomputed=recomputed[name]))
        found += _settled_audit_mismatches(exchange, stored, settled_audits.get(str(exchange.pk), []))
    return found


def _settled_audit_mismatches(
    exchange: Exchange, receipt: Mapping[str, Any], rows: Sequence[_Audit]
) -> list[dict[str, Any]]:
    if not rows:
        return [_finding(exchange, "settled_audit", error="no loop.exchange.settled audit row")]
    found: list[dict[str, Any]] = []
    for row in rows:
        for audited_name, receipt_name in (("receipt_digest", "digest"), ("last_seq", "last_seq")):
            if row.payload.get(audited_name) != receipt.get(receipt_name):
                found.append(_finding(exchange, f"settled_audit.{audited_name}", audit_seq=row.seq,
                                      audited=row.payload.get(audited_name), stored=receipt.get(receipt_name)))
    return found


def _event_audit_mismatches(
    exchanges: Sequence[Exchange], events: Sequence[_Event], audits: Iterable[_Audit]
) -> list[dict[str, Any]]:
    """Each audit row that names an event by seq must still find it as it recorded it."""
    by_seq = {event.seq: event for event in events}
    by_pk = {exchange.pk: exchange for exchange in exchanges}
    found: list[dict[str, Any]] = []
    for row in audits:
        seq = row.payload.get("seq")
        if row.kind == AuditKind.EXCHANGE_SETTLED or not isinstance(seq, int):
            continue
        audited_exchange = by_pk.get(row.exchange_id) if row.exchange_id is not None else None
        event = by_seq.get(seq)
        if event is None:
            found.append(_finding(audited_exchange, "event", seq=seq, audit_seq=row.seq,
                                  error="an audited event is missing"))
            continue
        exchange = by_pk.get(event.exchange_id) if event.exchange_id is not None else audited_exchange
        if audited_exchange is not None and event.exchange_id != audited_exchange.pk:
            found.append(_finding(audited_exchange, "event.exchange", seq=seq, audit_seq=row.seq,
                                  audited=audited_exchange.pk, stored=event.exchange_id))
        if "digest" in row.payload:
            recomputed = events_digest([(event.seq, event.kind, event.payload)])
            if row.payload["digest"] != recomputed:
                found.append(_finding(exchange, "event.digest", seq=seq, kind=event.kind, audit_seq=row.seq,
                                      audited=row.payload["digest"], recomputed=recomputed))
        elif row.kind == AuditKind.TOOL_CALL_TRANSITION:
            found += _intent_mismatches(exchange, event, row)
    return found


def _intent_mismatches(exchange: Exchange | None, event: _Event, row: _Audit) -> list[dict[str, Any]]:
    """A ``control:tool_intent`` row is audited by its call's key, tool and arguments hash."""
    audited = {"kind": EventKind.TOOL_INTENT.value, "key": row.payload.get("key"), "name": row.payload.get("tool"),
               "arguments_hash": row.payload.get("arguments_hash")}
    payload = event.payload if isinstance(event.payload, dict) else {}
    stored = {"kind": event.kind, "key": payload.get("key"), "name": payload.get("name"),
              "arguments_hash": payload.get("arguments_hash")}
    if stored == audited:
        return []
    return [_finding(exchange, "event.intent", seq=event.seq, audit_seq=row.seq, audited=audited, stored=stored)]


def _projection_mismatches(exchanges: Sequence[Exchange], events: Sequence[_Event]) -> list[dict[str, Any]]:
    """Project every narrative, one window per compaction, as the driver would on its next turn."""
    active = {e.pk for e in exchanges if e.status in _ACTIVE}
    number = {e.pk: e.number for e in exchanges}
    windows: dict[str, list[list[EventRow]]] = defaultdict(lambda: [[]])
    for event in events:
        if event.kind not in CONVERSATION_KINDS or event.exchange_id in active:
            continue
        segments = windows[event.narrative]
        if event.kind == EventKind.COMPACTION and segments[-1]:
            segments.append([])
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        segments[-1].append(EventRow(seq=event.seq, kind=event.kind, payload=payload,
                                      exchange=number.get(event.exchange_id or 0), narrative=event.narrative))
    found: list[dict[str, Any]] = []
    for narrative, segments in windows.items():
        for rows in segments:
            try:
                project(rows)
            except ProjectionError as exc:
                found.append(_finding(None, "projection", narrative=narrative, first_seq=rows[0].seq,
                                      code=exc.code, error=str(exc)))
    return found
