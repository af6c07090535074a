"""A tool's effect refused after its work, recorded so the run says in words what was not applied.

A worker that stalled past its lease (SIGSTOP, a long pause, a frozen VM) and was taken over may not
commit what its tool did: the effect's transaction holds the driver's fence
(``Store.hold_fence``, the check the kernel's own rows pass). A command whose starting files changed
meanwhile may not overwrite the newer version (the workspace's compare-and-set). Either way nothing
is applied, and one ``control:effect_refused`` row in the session's narrative (a line on the run
page's timeline) and one ``skald.effect.refused`` audit row say which tool, call and targets (workspace
paths, scratchpad keys).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.errors import LeaseLost
from loop.events import EventKind
from skald.core.ids import new_token
from skald.loop_adapters.store import kernel_store

RefusedBecause = Literal["lease_lost", "stale_version"]


def effect_refused_record(*, session_id: int, tool: str, call_key: str, targets: Sequence[str],
                          reason: RefusedBecause, actor: Actor) -> None:
    """Record a refused effect (one transaction: the narrative row and its audit row).

    The row belongs to no exchange: a driver that lost its lease may not append to the exchange
    (another driver owns its rows now), yet the refusal must still be seen on the run.
    """
    payload = {"tool": tool, "call": call_key, "targets": list(targets)[:50], "reason": reason}
    with transaction.atomic():
        kernel_store().append_event(session_id=session_id, kind=EventKind.EFFECT_REFUSED, payload=payload,
                                    key=f"{call_key or f's{session_id}'}:refused:{new_token()}",
                                    principal=f"{actor.type}:{actor.id}")
        audit_append(actor=actor, kind=AuditKind.EFFECT_REFUSED, subject_type="session",
                     subject_id=session_id, payload=payload)


@contextmanager
def refused_when_taken_over(*, session_id: int, tool: str, call_key: str, targets: Sequence[str],
                            actor: Actor) -> Iterator[None]:
    """Around an effect whose transaction holds the driver's fence: when the fence refuses
    (``LeaseLost``: that transaction rolled back), record the refusal in a transaction of its own
    and re-raise, so the driver stops as it would at its next row."""
    try:
        yield
    except LeaseLost:
        effect_refused_record(session_id=session_id, tool=tool, call_key=call_key, targets=targets,
                              reason="lease_lost", actor=actor)
        raise
