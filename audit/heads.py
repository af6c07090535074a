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
from django.db import transaction

from audit import chain
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import ChainHead
from audit.selectors import audit_rows_in_chain_order, chain_head_latest, chain_heads, chain_tip
from audit.services import CHAIN_SUBJECT, audit_append, chain_head_export, chain_head_record, chain_verify
from skald.core import clock
from skald.core.errors import Conflict

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


def chain_heads_sign(*, actor: Actor) -> list[int]:
    """Sign the heads recorded before ``SKALD_AUDIT_KEY`` existed; returns their seqs (oldest first).

    With a key configured, verification fails on any unsigned head, so an operator who adds a key to
    a running deployment signs the older heads once. Refused, changing nothing, when:

    - no key is configured (``no_audit_key``);
    - a signed head (or the exported one) carries an invalid signature (``chain_head_forged``);
    - an unsigned head is newer than the oldest signed one (``chain_head_unsigned_late``): it was
      recorded, or blanked, after the key was in use, which is evidence, not an oversight;
    - the chain does not verify against the heads and the exported head (``chain_broken``).

    The signatures and one CHAIN_HEADS_SIGNED audit row commit together; the latest head is then
    exported again, signed.
    """
    key = settings.SKALD_AUDIT_KEY
    if not key:
        raise Conflict("SKALD_AUDIT_KEY is not set: there is nothing to sign heads with.", code="no_audit_key")
    exported = head_sink_read()
    with transaction.atomic(durable=True):
        heads = list(ChainHead.objects.select_for_update().order_by("seq"))
        others: list[chain.HeadLike] = [chain.ExportedHead.parse(exported)] if exported else []
        for head in [*heads, *others]:
            if head.signature and not chain.head_signature_valid(key, head):
                raise Conflict(f"Head #{head.seq} carries an invalid signature: nothing was signed.",
                               code="chain_head_forged")
        first_signed = min((head.seq for head in heads if head.signature), default=None)
        unsigned = [head for head in heads if not head.signature]
        late = [head.seq for head in unsigned if first_signed is not None and head.seq > first_signed]
        if late:
            raise Conflict(f"Unsigned heads {late} are newer than signed head #{first_signed}: they were recorded "
                           "or blanked after the key was in use, so they are not signed.",
                           code="chain_head_unsigned_late")
        report = chain.verify_rows(audit_rows_in_chain_order(), [*heads, *others], key=None)
        if not report.ok:
            raise Conflict(f"The audit chain is broken at seq {report.first_bad_seq} ({report.reason}): nothing "
                           "was signed.", code="chain_broken")
        for head in unsigned:
            head.signature = chain.head_signature(key, seq=head.seq, hash=head.hash, recorded_at=head.recorded_at)
            head.save(update_fields=["signature"])
        signed = [head.seq for head in unsigned]
        if signed:
            audit_append(actor=actor, kind=AuditKind.CHAIN_HEADS_SIGNED, subject_type=CHAIN_SUBJECT[0],
                         subject_id=CHAIN_SUBJECT[1], payload={"heads": signed})
    if signed:
        head_sink_write(chain_head_export())
    return signed
