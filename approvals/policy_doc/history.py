"""Recorded gate decisions, for the impact preview (a selector).

Every gate decision is an ``approvals.gate.decision`` audit row (tool, verdict, rule, arguments
hash, the scope's user as the actor; the scope's agent since issue 32). The arguments themselves
are on the call's ``loop.ToolCall`` row, which the audit row names; the agent of an older row is its
session's. A row whose call was deleted since (its session was) cannot be re-decided and is counted
apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model

from approvals.policy_doc.impact import RecordedDecision
from audit.kinds import AuditKind
from audit.models import ActorType, AuditEvent
from loop.models import ToolCall
from skald.core import clock

DEFAULT_DAYS = 7
_CHUNK = 500  # ids per IN (...): well under SQLite's parameter limit


@dataclass(frozen=True, slots=True)
class History:
    decisions: list[RecordedDecision]
    since: datetime
    missing: int  # decisions whose call no longer exists


def _chunks(items: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start:start + _CHUNK]


def _first_seq_since(since: datetime) -> int:
    """The first chain position at or after ``since``, by binary search over ``seq`` (its unique
    index): a row's time is never before its predecessor's (``audit.services``), so the last days
    are one index range however long the chain, with no index on time. About 2·log2(rows) lookups."""
    first = AuditEvent.objects.order_by("seq").values_list("seq", flat=True).first()
    last = AuditEvent.objects.order_by("-seq").values_list("seq", flat=True).first()
    if first is None or last is None:
        return 0
    low, high = first, last + 1  # the answer is in [low, high]; high: nothing is that recent
    while low < high:
        middle = (low + high) // 2
        row = AuditEvent.objects.filter(seq__gte=middle).order_by("seq").values_list("seq", "time").first()
        if row is None:
            high = middle
        elif row[1] >= since:
            high = middle if row[0] > middle else row[0]
        else:
            low = row[0] + 1
    return low


def recorded_decisions(*, days: int = DEFAULT_DAYS) -> History:
    """The gate decisions of the last ``days`` days, oldest first, with their calls' arguments."""
    since = clock.now() - timedelta(days=days)
    rows = list(AuditEvent.objects.filter(seq__gte=_first_seq_since(since), kind=AuditKind.GATE_DECISION,
                                          time__gte=since).order_by("seq")
                .values_list("actor_type", "actor_id", "subject_id", "payload"))
    call_ids = sorted({int(subject) for _, _, subject, _ in rows if subject.isascii() and subject.isdecimal()})
    calls: dict[int, tuple[object, str]] = {}
    for chunk in _chunks(call_ids):
        for pk, arguments, agent in ToolCall.objects.filter(pk__in=chunk).values_list(
                "pk", "arguments", "session__agent"):
            calls[pk] = (arguments, agent)
    user_ids = sorted({int(actor) for kind, actor, _, _ in rows if kind == ActorType.USER and actor.isdecimal()})
    usernames: dict[int, str] = {}
    for chunk in _chunks(user_ids):
        usernames.update(get_user_model().objects.filter(pk__in=chunk).values_list("pk", "username"))
    decisions: list[RecordedDecision] = []
    missing = 0
    for actor_type, actor_id, subject, payload_text in rows:
        call = calls.get(int(subject)) if subject.isascii() and subject.isdecimal() else None
        if call is None:
            missing += 1
            continue
        payload = json.loads(payload_text)
        arguments, session_agent = call
        user = usernames.get(int(actor_id)) if actor_type == ActorType.USER and actor_id.isdecimal() else None
        decisions.append(RecordedDecision(
            call_id=subject, tool=str(payload.get("tool", "")), args=arguments, action=str(payload.get("action", "")),
            user=user, agent=payload.get("agent", session_agent), arguments_hash=str(payload.get("arguments_hash", "")),
        ))
    return History(decisions=decisions, since=since, missing=missing)
