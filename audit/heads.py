"""Chain heads kept where the database's writers cannot rewrite them, and the head a check used.

A tail cut off cleanly leaves a shorter chain that still verifies; only a head recorded before the
cut reveals it. So heads are recorded on a schedule (django-q2, ``skald.tasks.record_chain_head``)
and when ``make run``'s launcher stops, and the latest one is exported, HMAC-signed with
``SKALD_AUDIT_KEY``, to the operator's sink (docs/audit-heads.md):

- always a log line on the ``skald.audit.chain_head`` logger (ship it to a log store the database's
  writers cannot edit);
- and, when ``SKALD_CHAIN_HEAD_FILE`` names a file, that file, replaced atomically (keep it on a
  volume the database's writers cannot write, or copy it off the host).

``verify_chain`` checks against every head in the database and the exported one, and reports the
newest it checked against and its age: rows appended after that head are the window a truncation
could still hide in (at most one schedule interval).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings

from audit import chain
from audit.actors import Actor
from audit.models import ChainHead
from audit.selectors import chain_head_latest, chain_heads, chain_tip
from audit.services import chain_head_export, chain_head_record, chain_verify
from skald.core import clock

sink_log = logging.getLogger("skald.audit.chain_head")


@dataclass(frozen=True, slots=True)
class CheckedHead:
    """The newest head a verification checked against, where it came from, and how old it is."""

    seq: int
    hash: str
    recorded_at: str
    source: str  # "database" or the exported file's path
    age: timedelta | None  # None when an exported head's time cannot be read
    signed: bool


def chain_head_checkpoint(*, actor: Actor) -> ChainHead:
    """Record a head (unless nothing was appended since the last one) and export the latest.

    Recording appends a row, so an idle chain would otherwise grow one row per schedule tick.
    """
    latest = chain_head_latest()
    head = latest if latest is not None and latest.seq == chain_tip()[0] else chain_head_record(actor=actor)
    head_sink_write(chain_head_export(head=head))
    return head


def chain_head_scheduled() -> int:
    """django-q2's scheduled entry point (audit/migrations/0003): returns the head's seq."""
    return chain_head_checkpoint(actor=Actor.system("schedule")).seq


def head_sink_write(exported: dict[str, Any]) -> None:
    """Export a head to the log sink and, when configured, to ``SKALD_CHAIN_HEAD_FILE``."""
    line = json.dumps(exported, sort_keys=True)
    sink_log.info("audit chain head %s", line)
    target = settings.SKALD_CHAIN_HEAD_FILE
    if not target:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename: a reader (or a crash) never sees half a head.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(line + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def head_sink_read() -> dict[str, Any] | None:
    """The head exported to ``SKALD_CHAIN_HEAD_FILE``, or ``None`` when none is configured or written.

    Raises:
        ValueError: the file exists but does not hold a JSON object.
    """
    target = settings.SKALD_CHAIN_HEAD_FILE
    if not target or not Path(target).exists():
        return None
    data = json.loads(Path(target).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"head file {target} does not hold a JSON object")
    return data


def chain_verify_with_head(
    *, exported_head: dict[str, Any] | None = None, exported_from: str = ""
) -> tuple[chain.VerifyReport, CheckedHead | None]:
    """Verify the chain against the database's heads and an exported one (by default the sink
    file's), and name the newest head checked against with its age (``None``: no head at all, so
    a truncated tail could not be noticed)."""
    if exported_head is None:
        exported_head = head_sink_read()
        exported_from = str(settings.SKALD_CHAIN_HEAD_FILE)
    report = chain_verify(exported_head=exported_head)
    candidates: list[tuple[chain.HeadLike, str]] = [(head, "database") for head in chain_heads()]
    if exported_head is not None:
        candidates.append((chain.ExportedHead.parse(exported_head), exported_from or "exported head"))
    if not candidates:
        return report, None
    # On a tie the exported head is named: it is the one the database's writers cannot reach.
    newest, source = max(candidates, key=lambda pair: (pair[0].seq, pair[1] != "database"))
    recorded = _as_datetime(newest.recorded_at)
    return report, CheckedHead(
        seq=newest.seq, hash=newest.hash, source=source, signed=bool(newest.signature),
        recorded_at=chain.format_time(recorded) if recorded else str(newest.recorded_at),
        age=clock.now() - recorded if recorded else None,
    )


def _as_datetime(value: datetime | str) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
