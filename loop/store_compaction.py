"""The store's compaction writes and reads (SPEC L14): one durable, idempotent step per compaction.

A compaction commits as one transaction: the ``compaction`` row (summary + manifest), the
``control:compaction_probe`` row beside it, the exchange's token meter and one audit row for each
row. A crash before it leaves no trace; a crash after it leaves both rows whole. The rows' keys
derive from the manifest, so a retry of the same cycle finds the committed rows and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import transaction

from loop import sql
from loop.digest import events_digest
from loop.events import CONVERSATION_KINDS, EventKind
from loop.journal import Journal
from loop.models import Exchange
from loop.projection import EventRow, Replay, tail_first_seq
from loop.provenance import UNTRUSTED, EventRowView, covered_trust
from loop.sql import events as event_rows
from loop.sql import exchanges as exchange_rows

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Episode:
    """What an episode (one session's conversation in one narrative) has compacted so far.

    Counted from the episode's ``control:compaction_probe`` rows: each commits in the transaction of
    the compaction it counts, so a resumed drive, a later exchange of the session or another worker
    reads the same count and the same latch. A new session is a new episode."""

    compactions: int
    latched: bool


@dataclass(frozen=True, slots=True)
class CompactionCommit:
    seq: int
    probe_seq: int
    replayed: bool


def compaction_key(session_id: int, narrative: str, number: int, last_seq: int) -> str:
    return f"s{session_id}:{narrative}e{number}:compaction:{last_seq}"


class CompactionLog:
    """Compaction rows and the windows they start."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def replay_window(self, session_id: int, *, narrative: str = "", cap: int) -> Replay:
        """The rows a fresh context window is built from: everything from the verbatim tail of the
        narrative's latest compaction on (the last ``cap`` of them, oldest first), and whether older
        rows were cut off. Without a compaction, the last ``cap`` rows."""
        with sql.cursor() as cursor:
            latest = event_rows.latest_compaction(cursor, session_id=session_id, narrative=narrative)
            after = 0
            if latest is not None:
                boundary = EventRow(seq=latest[0], kind=EventKind.COMPACTION, payload=latest[1], narrative=narrative)
                after = tail_first_seq(boundary) - 1
            fetched, stamp = event_rows.conversation_rows(cursor, session_id=session_id, narrative=narrative,
                                                          kinds=CONVERSATION_KINDS, after_seq=after, limit=cap + 1)
        window = [EventRow(seq=seq, kind=kind, payload=payload, narrative=narrative)
                  for seq, kind, payload in fetched[:cap]]
        window.reverse()
        return Replay(window, len(fetched) > cap, stamp)

    def episode(self, session_id: int, *, narrative: str = "") -> Episode:
        """The episode of ``narrative`` in a session: every exchange of the session shares it."""
        with sql.cursor() as cursor:
            reports = event_rows.compaction_probes(cursor, session_id=session_id, narrative=narrative)
        return Episode(len(reports), any(bool(report.get("latched")) for report in reports))

    def commit(
        self,
        *,
        exchange: Exchange,
        narrative: str,
        summary: str,
        manifest: Mapping[str, Any],
        report: Mapping[str, Any],
        usage: tuple[int, int],
        spent_tokens: int,
        accounting_incomplete: bool,
        principal: str,
    ) -> CompactionCommit:
        """Commit a compaction and its probe report; an exact retry returns the stored rows."""
        session_id = exchange.session_id
        key = compaction_key(session_id, narrative, exchange.number, int(manifest["last_seq"]))
        with self.journal.batch():  # the rows and audit rows go out together (loop/journal.py)
            with sql.cursor() as cursor:
                stored = event_rows.find_event(cursor, key)
                stored_probe = event_rows.find_event(cursor, key + ":probe") if stored else None
            if stored is not None and stored_probe is not None:
                return CompactionCommit(stored[0], stored_probe[0], replayed=True)
            payload: dict[str, Any] = {"summary": summary, "manifest": dict(manifest)}
            if self._covers_untrusted(session_id, narrative, manifest):  # the summary inherits the taint
                payload["trust"] = UNTRUSTED
            fresh = stored is None  # looked up just above; the probe row commits with it
            seq = self.journal.append(session_id, EventKind.COMPACTION, payload, key, exchange_id=exchange.pk,
                                      narrative=narrative, fresh=fresh)
            probe_payload = {**report, "compaction_seq": seq}
            probe_seq = self.journal.append(session_id, EventKind.COMPACTION_PROBE, probe_payload, key + ":probe",
                                            exchange_id=exchange.pk, narrative=narrative, fresh=fresh)
            with sql.cursor() as cursor:
                exchange_rows.add_usage(cursor, exchange.pk, input_tokens=usage[0], output_tokens=usage[1],
                                     spent=spent_tokens, incomplete=accounting_incomplete)
            self.journal.audit(
                "loop.compaction.committed", principal=principal, subject_type="exchange", subject_id=exchange.pk,
                payload={"seq": seq, "narrative": narrative, "first_seq": manifest["first_seq"],
                         "last_seq": manifest["last_seq"], "count": manifest["count"],
                         "covered_digest": manifest["digest"],
                         "digest": events_digest([(seq, EventKind.COMPACTION, payload)])},
            )
            self.journal.audit(
                "loop.compaction.probed", principal=principal, subject_type="exchange", subject_id=exchange.pk,
                payload={"seq": probe_seq, "compaction_seq": seq, "result": report["result"],
                         "lost_permille": report["lost_permille"], "latched": report["latched"],
                         "digest": events_digest([(probe_seq, EventKind.COMPACTION_PROBE, probe_payload)])},
            )
            self.journal.wake(session_id, probe_seq)
        return CompactionCommit(seq, probe_seq, replayed=False)

    @staticmethod
    def _covers_untrusted(session_id: int, narrative: str, manifest: Mapping[str, Any]) -> bool:
        with sql.cursor() as cursor:
            rows = [EventRowView(*row) for row in event_rows.provenance_rows(cursor, session_id)]
        return covered_trust(rows, narrative=narrative, first_seq=int(manifest.get("first_seq") or 0),
                             last_seq=int(manifest["last_seq"])) == UNTRUSTED

    def stop_at_quota(self, exchange: Exchange, *, narrative: str, payload: Mapping[str, Any],
                      then: Callable[[], T]) -> T:
        """The loud stop past the compaction quota: a named session-log row, and ``then`` (the
        frame's own ending: the root settles the exchange, a child closes its frame) in the same
        transaction."""
        with transaction.atomic():
            self.journal.append(exchange.session_id, EventKind.COMPACTION_QUOTA, dict(payload),
                                f"s{exchange.session_id}:{narrative}e{exchange.number}:compaction_quota",
                                exchange_id=exchange.pk, narrative=narrative)
            return then()
