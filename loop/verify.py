"""The kernel verifies its own invariants from stored rows (SPEC L5, L6, U2): "verify, don't re-run".

For one session, recomputed from stored columns only — no provider is built or called:

* **sequence** — the session's seqs are exactly ``1..last_seq`` and exchange numbers ``1..n``;
* **receipts** — each settled exchange's receipt is rebuilt with :func:`loop.outcomes.build_receipt`
  over its events as stored now and compared field by field;
* **projection** — each narrative's conversation rows project without a refusal, one window per
  compaction (rows of a still open or parked exchange are left out: their tool group may be open);
* **frames** — in a settled exchange every child frame is closed, was opened and closed in its own
  narrative, and left exactly one ``subagent_result`` for its parent (and none names a frame that
  does not exist).
* **compactions** — manifests, probe reports and the windows around each compaction are recomputed
  (:mod:`loop.compaction.verify`).
* **provenance** — each ``control:provenance`` row (a call made in a tainted frame) is recomputed from
  the rows before it and the call's arguments as the assistant row planned them
  (:func:`loop.provenance.provenance_mismatches`).

The product cross-checks these rows against its audit log (`skald.crosscheck`); the kernel knows
nothing of that log.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loop.compaction.verify import compaction_mismatches
from loop.context import mask_pii
from loop.events import CONVERSATION_KINDS, EventKind
from loop.models import Exchange, ExchangeStatus, Frame, FrameStatus
from loop.outcomes import build_receipt
from loop.projection import EventRow, ProjectionError, project
from loop.provenance import provenance_mismatches
from loop.sql import events as event_rows
from loop.sql import exchanges as exchange_rows
from loop.sql import frames as frame_rows
from loop.store_calls import parse_arguments
from loop.tripwires import Detector

Finding = dict[str, Any]

# Every receipt field rebuilt from stored rows; ``detail`` (the answer, a reason) is not derivable.
RECEIPT_FIELDS = (
    "exchange", "session", "number", "request_key", "outcome", "turns", "input_tokens", "output_tokens",
    "events", "first_seq", "last_seq", "digest",
)  # fmt: skip
_ACTIVE = (ExchangeStatus.OPEN, ExchangeStatus.PARKED)
_LISTED = 20


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    kind: str
    payload: Any
    exchange_id: int | None
    narrative: str


@dataclass(frozen=True, slots=True)
class SessionRows:
    """One session's stored rows, loaded once for the kernel's checks and the product's."""

    session_id: int
    last_seq: int
    exchange_count: int
    exchanges: list[Exchange]
    events: list[StoredEvent]
    frames: list[Frame] = field(default_factory=list)


def load_session_rows(session_id: int) -> SessionRows | None:
    """The rows to verify, or ``None`` when the session does not exist."""
    counters = event_rows.session_counters(session_id)
    if counters is None:
        return None
    events = [StoredEvent(*row) for row in event_rows.session_rows(session_id)]
    return SessionRows(session_id=session_id, last_seq=counters[0], exchange_count=counters[1],
                       exchanges=exchange_rows.session_exchanges(session_id), events=events,
                       frames=frame_rows.session_frames(session_id))


def finding(exchange: Exchange | None, field: str, **values: Any) -> Finding:
    """One mismatch: always ``exchange``, ``number`` (None for session-level ones) and ``field``."""
    return {
        "exchange": exchange.pk if exchange is not None else None,
        "number": exchange.number if exchange is not None else None,
        "field": field,
        **values,
    }


def verify_rows(rows: SessionRows, *, guard: Detector | None = None) -> list[Finding]:
    """Every kernel invariant over one session's stored rows; an empty list means it holds.

    ``guard`` is the credential detector the deployment's drivers use (the vendored rule set when
    None): compaction probes are recomputed over the text as it screened it.
    """
    return [
        *sequence_mismatches(rows.events, last_seq=rows.last_seq),
        *numbering_mismatches(rows.exchanges, exchange_count=rows.exchange_count),
        *receipt_mismatches(rows.exchanges, rows.events),
        *projection_mismatches(rows.exchanges, rows.events),
        *frame_mismatches(rows.exchanges, rows.events, rows.frames),
        *compaction_mismatches(rows.events, mask=mask_pii, guard=guard,
                               skip_exchanges={e.pk for e in rows.exchanges if e.status in _ACTIVE}),
        *provenance_checks(rows.events),
    ]


def provenance_checks(events: Sequence[StoredEvent]) -> list[Finding]:
    """Every stored provenance row recomputed from stored rows (no model, no memory)."""
    arguments: dict[str, Mapping[str, Any]] = {}
    for event in events:
        if event.kind == EventKind.ASSISTANT and isinstance(event.payload, Mapping):
            for planned in event.payload.get("tool_calls") or ():
                arguments[str(planned.get("key"))] = parse_arguments(str(planned.get("arguments") or "")) or {}
    return [{"exchange": None, "number": None, **found} for found in provenance_mismatches(events, arguments)]


def sequence_mismatches(events: Sequence[StoredEvent], *, last_seq: int) -> list[Finding]:
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
            missing += range(expected, min(event.seq, expected + _LISTED - len(missing)))
        expected = event.seq + 1
    beyond = [e.seq for e in events if e.seq > last_seq]
    if expected <= last_seq:
        missing_count += last_seq + 1 - expected
        missing += range(expected, min(last_seq + 1, expected + _LISTED - len(missing)))
    found: list[Finding] = []
    if missing_count:
        found.append(finding(None, "seq", error="gap", missing=missing[:_LISTED], missing_count=missing_count,
                             last_seq=last_seq))
    if duplicates:
        found.append(finding(None, "seq", error="duplicate", duplicates=duplicates[:_LISTED]))
    if beyond:
        found.append(finding(None, "seq", error="beyond last_seq", beyond=beyond[:_LISTED], last_seq=last_seq))
    return found


def numbering_mismatches(exchanges: Sequence[Exchange], *, exchange_count: int) -> list[Finding]:
    numbers = [e.number for e in exchanges]
    if numbers == list(range(1, exchange_count + 1)):
        return []
    return [finding(None, "exchange_numbers", stored=exchange_count, recomputed=numbers[:100])]


def receipt_mismatches(exchanges: Sequence[Exchange], events: Sequence[StoredEvent]) -> list[Finding]:
    """A settled exchange's stored receipt must equal the one rebuilt from its stored events."""
    by_exchange: dict[int, list[tuple[int, str, Any]]] = defaultdict(list)
    for event in events:
        if event.exchange_id is not None:
            by_exchange[event.exchange_id].append((event.seq, event.kind, event.payload))
    found: list[Finding] = []
    for exchange in exchanges:
        if exchange.status != ExchangeStatus.SETTLED:
            continue  # parked, open or broken: no receipt yet
        stored = exchange.receipt
        if not isinstance(stored, dict):
            found.append(finding(exchange, "receipt", stored=stored, error="a settled exchange has no receipt"))
            continue
        recomputed = build_receipt(exchange, outcome=exchange.outcome, events=by_exchange[exchange.pk],
                                   detail=stored.get("detail") or {})
        for name in RECEIPT_FIELDS:
            if stored.get(name) != recomputed[name]:
                found.append(finding(exchange, name, stored=stored.get(name), recomputed=recomputed[name]))
    return found


def projection_mismatches(exchanges: Sequence[Exchange], events: Sequence[StoredEvent]) -> list[Finding]:
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
    found: list[Finding] = []
    for narrative, segments in windows.items():
        for window in segments:
            try:
                project(window)
            except ProjectionError as exc:
                found.append(finding(None, "projection", narrative=narrative, first_seq=window[0].seq,
                                     code=exc.code, error=str(exc)))
    return found


def frame_mismatches(exchanges: Sequence[Exchange], events: Sequence[StoredEvent],
                     frames: Sequence[Frame]) -> list[Finding]:
    """The frame tree of every settled exchange is whole: each child frame closed, its open and close
    rows in its narrative, and exactly one ``subagent_result`` naming it."""
    by_pk = {exchange.pk: exchange for exchange in exchanges}
    results: dict[int, int] = defaultdict(int)
    marks: set[tuple[str, int]] = set()
    for event in events:
        payload = event.payload if isinstance(event.payload, Mapping) else {}
        if event.kind == EventKind.SUBAGENT_RESULT and isinstance(payload.get("frame"), int):
            results[payload["frame"]] += 1
        elif event.kind in (EventKind.FRAME_OPENED, EventKind.FRAME_CLOSED) and isinstance(payload.get("frame"), int):
            marks.add((event.kind, payload["frame"]))
    known = {frame.pk for frame in frames}
    found: list[Finding] = []
    for frame in frames:
        exchange = by_pk.get(frame.exchange_id)
        if frame.depth == 0 or exchange is None or exchange.status != ExchangeStatus.SETTLED:
            continue
        if frame.status != FrameStatus.CLOSED:
            found.append(finding(exchange, "frame", frame=frame.pk, error="a child of a settled exchange is open"))
        for kind in (EventKind.FRAME_OPENED, EventKind.FRAME_CLOSED):
            if (kind, frame.pk) not in marks:
                found.append(finding(exchange, "frame", frame=frame.pk, error=f"no {kind} row"))
        if results.get(frame.pk, 0) != 1:
            found.append(finding(exchange, "subagent_result", frame=frame.pk, stored=results.get(frame.pk, 0),
                                 recomputed=1))
    for frame_id in sorted(set(results) - known):
        found.append(finding(None, "subagent_result", frame=frame_id, error="names a frame that does not exist"))
    return found
