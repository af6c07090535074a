"""Replay-verify a run (SPEC U2): the kernel's own checks plus the product's cross-check of the two
logs — the session events the kernel stored and the audit rows that recorded them.

The kernel part (`loop.verify`) rebuilds receipts, seq contiguity and the projection. Here, for the
same rows:

* **settlement audit** — the ``receipt_digest`` and ``last_seq`` the ``loop.exchange.settled``
  audit row recorded equal the stored receipt's (catches a receipt rewritten to fit edited rows);
* **event audit** — every audit row that names an event by ``seq`` (admitted, turn ended, tool-call
  transition, event appended, frame opened or closed) still finds that event, in that exchange,
  with the digest it recorded (intent rows, audited without a digest, are compared key by key);
* **delivered results** — every job run delivered into this session has its ``skald.job.delivered``
  audit row, and the exchange that row names holds exactly one ``task_completed`` result, under
  the request key derived from the job.

Trust boundary: the audit rows are taken as recorded; ``verify_chain`` is what proves them intact.
No provider is ever built or called.
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
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, Frame, ToolCall
from loop.verify import Finding, SessionRows, StoredEvent, finding, load_session_rows, verify_rows
from skald import plugins
from skald.core.errors import NotFound
from skald.models import Run

# Audit rows that name a session event by ``seq``.
_EVENT_AUDIT_KINDS = (
    AuditKind.EXCHANGE_ADMITTED, AuditKind.TURN_ENDED, AuditKind.TOOL_CALL_TRANSITION, AuditKind.EVENT_APPENDED,
    AuditKind.FRAME_OPENED, AuditKind.FRAME_CLOSED,
    AuditKind.COMPACTION_COMMITTED, AuditKind.COMPACTION_PROBED,
)  # fmt: skip


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
    """The kernel's checks and the audit cross-check of one session.

    Raises:
        NotFound: ``session_not_found``.
    """
    rows = load_session_rows(session_id)
    if rows is None:
        raise NotFound(f"Session {session_id} does not exist.", code="session_not_found")
    audits = _audit_rows(session_id, [e.pk for e in rows.exchanges])
    mismatches = verify_rows(rows, guard=plugins.tripwire_detector()) + _settled_audit_mismatches(rows, audits)
    mismatches += _event_audit_mismatches(rows.exchanges, rows.events, audits)
    mismatches += _delivery_mismatches(rows)
    return ReplayReport(ok=not mismatches, exchanges=len(rows.exchanges), events=len(rows.events),
                        mismatches=mismatches)


def _audit_rows(session_id: int, exchange_ids: Sequence[int]) -> list[_Audit]:
    owners = {
        ("tool_call", str(pk)): exchange_id
        for pk, exchange_id in ToolCall.objects.filter(session_id=session_id).values_list("pk", "exchange_id")
    }
    owners.update({("exchange", str(pk)): pk for pk in exchange_ids})
    owners.update({("frame", str(pk)): exchange_id
                   for pk, exchange_id in Frame.objects.filter(session_id=session_id).values_list("pk", "exchange_id")})
    subjects = (
        Q(subject_type="exchange", subject_id__in=[str(pk) for pk in exchange_ids])
        | Q(subject_type="tool_call", subject_id__in=[sid for st, sid in owners if st == "tool_call"])
        | Q(subject_type="frame", subject_id__in=[sid for st, sid in owners if st == "frame"])
        | Q(subject_type="session", subject_id=str(session_id))
    )
    rows = (
        AuditEvent.objects.filter(subjects, kind__in=[*_EVENT_AUDIT_KINDS, AuditKind.EXCHANGE_SETTLED])
        .order_by("seq")
        .values_list("seq", "kind", "subject_type", "subject_id", "payload")
    )
    return [_Audit(seq, kind, st, sid, _json_object(payload), owners.get((st, sid)))
            for seq, kind, st, sid, payload in rows]


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _settled_audit_mismatches(rows: SessionRows, audits: Sequence[_Audit]) -> list[Finding]:
    settled: dict[str, list[_Audit]] = defaultdict(list)
    for row in audits:
        if row.kind == AuditKind.EXCHANGE_SETTLED:
            settled[row.subject_id].append(row)
    found: list[Finding] = []
    for exchange in rows.exchanges:
        if exchange.status != ExchangeStatus.SETTLED or not isinstance(exchange.receipt, Mapping):
            continue
        found += _settled_rows_mismatches(exchange, exchange.receipt, settled.get(str(exchange.pk), []))
    return found


def _settled_rows_mismatches(exchange: Exchange, receipt: Mapping[str, Any], rows: Sequence[_Audit]) -> list[Finding]:
    if not rows:
        return [finding(exchange, "settled_audit", error="no loop.exchange.settled audit row")]
    found: list[Finding] = []
    for row in rows:
        for audited_name, receipt_name in (("receipt_digest", "digest"), ("last_seq", "last_seq")):
            if row.payload.get(audited_name) != receipt.get(receipt_name):
                found.append(finding(exchange, f"settled_audit.{audited_name}", audit_seq=row.seq,
                                     audited=row.payload.get(audited_name), stored=receipt.get(receipt_name)))
    return found


def _event_audit_mismatches(
    exchanges: Sequence[Exchange], events: Sequence[StoredEvent], audits: Iterable[_Audit]
) -> list[Finding]:
    """Each audit row that names an event by seq must still find it as it recorded it."""
    by_seq = {event.seq: event for event in events}
    by_pk = {exchange.pk: exchange for exchange in exchanges}
    found: list[Finding] = []
    for row in audits:
        seq = row.payload.get("seq")
        if row.kind == AuditKind.EXCHANGE_SETTLED or not isinstance(seq, int):
            continue
        audited_exchange = by_pk.get(row.exchange_id) if row.exchange_id is not None else None
        event = by_seq.get(seq)
        if event is None:
            found.append(finding(audited_exchange, "event", seq=seq, audit_seq=row.seq,
                                 error="an audited event is missing"))
            continue
        exchange = by_pk.get(event.exchange_id) if event.exchange_id is not None else audited_exchange
        if audited_exchange is not None and event.exchange_id != audited_exchange.pk:
            found.append(finding(audited_exchange, "event.exchange", seq=seq, audit_seq=row.seq,
                                 audited=audited_exchange.pk, stored=event.exchange_id))
        if "digest" in row.payload:
            recomputed = events_digest([(event.seq, event.kind, event.payload)])
            if row.payload["digest"] != recomputed:
                found.append(finding(exchange, "event.digest", seq=seq, kind=event.kind, audit_seq=row.seq,
                                     audited=row.payload["digest"], recomputed=recomputed))
        elif row.kind == AuditKind.TOOL_CALL_TRANSITION:
            found += _intent_mismatches(exchange, event, row)
    return found


def _intent_mismatches(exchange: Exchange | None, event: StoredEvent, row: _Audit) -> list[Finding]:
    """A ``control:tool_intent`` row is audited by its call's key, tool and arguments hash."""
    audited = {"kind": EventKind.TOOL_INTENT.value, "key": row.payload.get("key"), "name": row.payload.get("tool"),
               "arguments_hash": row.payload.get("arguments_hash")}
    payload = event.payload if isinstance(event.payload, dict) else {}
    stored = {"kind": event.kind, "key": payload.get("key"), "name": payload.get("name"),
              "arguments_hash": payload.get("arguments_hash")}
    if stored == audited:
        return []
    return [finding(exchange, "event.intent", seq=event.seq, audit_seq=row.seq, audited=audited, stored=stored)]


def _delivery_mismatches(rows: SessionRows) -> list[Finding]:
    """Each job run delivered into this session: its audit row, its exchange, one task_completed."""
    from skald.jobs.models import JobRun

    by_pk = {exchange.pk: exchange for exchange in rows.exchanges}
    runs = list(JobRun.objects.filter(job__parent_session_id=rows.session_id, delivered_at__isnull=False)
                .select_related("job"))
    audited = {
        (subject_id, payload.get("run")): payload.get("exchange")
        for subject_id, payload in (
            (sid, _json_object(text)) for sid, text in AuditEvent.objects.filter(
                kind=AuditKind.JOB_DELIVERED, subject_type="job",
                subject_id__in=[str(run.job_id) for run in runs]).values_list("subject_id", "payload"))
    }
    found: list[Finding] = []
    for run in runs:
        exchange = by_pk.get(run.delivery_exchange_id or 0)
        where = {"job": run.job_id, "run": run.number}
        if audited.get((str(run.job_id), run.number)) != run.delivery_exchange_id:
            found.append(finding(exchange, "delivery_audit", **where, stored=run.delivery_exchange_id,
                                 audited=audited.get((str(run.job_id), run.number))))
        if exchange is None or exchange.request_key != f"job:{run.job_id}:run:{run.number}:delivery":
            found.append(finding(exchange, "delivery", **where, error="no delivery exchange under the job's key"))
            continue
        delivered = [e for e in rows.events if e.exchange_id == exchange.pk and e.kind == EventKind.TOOL_RESULT
                     and isinstance(e.payload, dict) and e.payload.get("name") == "task_completed"]
        if len(delivered) != 1:
            found.append(finding(exchange, "delivery", **where, stored=len(delivered), recomputed=1))
    return found
