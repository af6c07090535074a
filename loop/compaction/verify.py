"""Replay-verify for compactions (SPEC L14, U2): recompute from stored rows, never call a model.

For each narrative:

* every ``compaction`` row's manifest (first/last seq, count, digest) is recomputed over the stored
  conversation rows it names, and its verbatim tail must start after them;
* its ``control:compaction_probe`` row is recomputed: the covered rows are projected (screened by
  the credential ``guard`` and masked, as the model saw them), the probes drawn again (by the draw
  the report names; a report without one was drawn by draw 1) and scored
  against the stored summary — same rows, same probes, same score. A report that names another
  rule set (``guard``: an organisation pattern was added or removed since) is not re-scored: the
  text the model saw cannot be recomputed under today's rules;
* the windows the driver built are recomputed — the rows before the first compaction, then for
  each compaction its summary, the tail it kept and the rows up to the next one — and each must
  project without a refusal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from loop.compaction.cycle import message_text
from loop.compaction.manifest import covered_fields
from loop.compaction.policy import LATCH_PERMILLE
from loop.compaction.probes import draw_probes, score
from loop.events import CONVERSATION_KINDS, EventKind
from loop.projection import EventRow, ProjectionError, arrange_window, project
from loop.tripwires import Detector, default_detector

Finding = dict[str, Any]
_MANIFEST_FIELDS = ("first_seq", "last_seq", "count", "digest")
_REPORT_FIELDS = ("pre_hits", "post_hits", "lost_permille", "result", "degraded", "latched")


class StoredRow(Protocol):
    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def payload(self) -> Any: ...
    @property
    def exchange_id(self) -> int | None: ...
    @property
    def narrative(self) -> str: ...


def _finding(field: str, narrative: str, seq: int, **values: Any) -> Finding:
    return {"exchange": None, "number": None, "field": field, "narrative": narrative, "seq": seq, **values}


def _row(event: StoredRow) -> EventRow:
    payload = event.payload if isinstance(event.payload, Mapping) else {}
    return EventRow(seq=event.seq, kind=event.kind, payload=payload, narrative=event.narrative)


def compaction_mismatches(
    events: Sequence[StoredRow], *, mask: Callable[[str], str], guard: Detector | None = None,
    skip_exchanges: Collection[int] = (),
) -> list[Finding]:
    """Manifests, probe reports and windows of every narrative's compactions; ``guard`` is the
    credential detector the driver folds windows under (the vendored rule set when None)."""
    guard = guard or default_detector()
    conversation: dict[str, list[EventRow]] = defaultdict(list)
    probes: dict[tuple[str, int], Mapping[str, Any]] = {}
    for event in events:
        if event.kind in CONVERSATION_KINDS and event.exchange_id not in skip_exchanges:
            conversation[event.narrative].append(_row(event))
        elif event.kind == EventKind.COMPACTION_PROBE and isinstance(event.payload, Mapping):
            probes[(event.narrative, int(event.payload.get("compaction_seq", 0)))] = event.payload
    found: list[Finding] = []
    for narrative, rows in conversation.items():
        found += _window_mismatches(narrative, rows)
        for row in rows:
            if row.kind == EventKind.COMPACTION:
                found += _manifest_mismatches(narrative, rows, row, probes.get((narrative, row.seq)), mask, guard)
    return found


def _window_mismatches(narrative: str, rows: Sequence[EventRow]) -> list[Finding]:
    bounds = [i for i, row in enumerate(rows) if row.kind == EventKind.COMPACTION] + [len(rows)]
    windows = [list(rows[:bounds[0]])] + [arrange_window(rows[:end]) for end in bounds[1:]]
    found: list[Finding] = []
    for window in windows:
        if not window:
            continue
        try:
            project(window)
        except ProjectionError as exc:
            found.append(_finding("compaction.window", narrative, window[0].seq, code=exc.code, error=str(exc)))
    return found


def _manifest_mismatches(narrative: str, rows: Sequence[EventRow], boundary: EventRow,
                         report: Mapping[str, Any] | None, mask: Callable[[str], str], guard: Detector
                         ) -> list[Finding]:
    manifest = boundary.payload.get("manifest", {})
    first, last = manifest.get("first_seq"), manifest.get("last_seq")
    covered = [row for row in rows if isinstance(first, int) and isinstance(last, int) and first <= row.seq <= last]
    if not covered:
        return [_finding("compaction.manifest", narrative, boundary.seq, error="the covered rows are missing")]
    found = [_finding(f"compaction.{name}", narrative, boundary.seq, stored=manifest.get(name), recomputed=value)
             for name, value in covered_fields(covered).items() if manifest.get(name) != value]
    tail = manifest.get("tail_first_seq")
    if not isinstance(tail, int) or not last < tail <= boundary.seq:
        found.append(_finding("compaction.tail_first_seq", narrative, boundary.seq, stored=tail))
    if report is None:
        return [*found, _finding("compaction.probe", narrative, boundary.seq, error="no probe report")]
    if report.get("guard", guard.fingerprint) != guard.fingerprint:
        return found  # screened under another rule set: not recomputable today (module docstring)
    try:
        messages = project(arrange_window(covered), mask=mask, guard=guard)
    except ProjectionError as exc:
        return [*found, _finding("compaction.covered", narrative, boundary.seq, code=exc.code, error=str(exc))]
    texts = [message_text(message) for message in messages]
    draw = int(report.get("draw", 1))  # a report without it was drawn by the first release's draw
    recomputed = score(draw_probes(texts, draw=draw), before="\n".join(texts),
                       summary=str(boundary.payload.get("summary", "")),
                       latch_permille=int(report.get("latch_permille", LATCH_PERMILLE)), draw=draw).as_payload()
    for name in ("probes", *_REPORT_FIELDS):
        if report.get(name) != recomputed[name]:
            found.append(_finding(f"compaction.probe.{name}", narrative, boundary.seq, stored=report.get(name),
                                  recomputed=recomputed[name]))
    return found
