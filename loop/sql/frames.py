"""Child frames (SPEC S1): one row opened per delegate, closed once with its outcome."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from loop.models import Frame, FrameStatus, SessionEvent


def open_child(*, session_id: int, exchange_id: int, depth: int, agent: str, narrative: str, parent_call_id: int,
               selection: Mapping[str, Any], now: datetime) -> Frame:
    return Frame.objects.create(session_id=session_id, exchange_id=exchange_id, depth=depth, agent=agent,
                                narrative=narrative, parent_call_id=parent_call_id, selection=dict(selection),
                                created_at=now)


def close(frame_id: int, *, outcome: str, now: datetime) -> bool:
    """Close an open frame; False when it was closed already (closing is once)."""
    return Frame.objects.filter(pk=frame_id, status=FrameStatus.OPEN).update(
        status=FrameStatus.CLOSED, outcome=outcome, closed_at=now) == 1


def session_frames(session_id: int) -> list[Frame]:
    return list(Frame.objects.filter(session_id=session_id).order_by("id"))


def open_children(exchange_id: int) -> list[Frame]:
    """An exchange's open child frames, deepest first (then oldest first)."""
    return list(Frame.objects.filter(exchange_id=exchange_id, depth__gt=0, status=FrameStatus.OPEN)
                .select_related("parent_call", "parent_call__frame").order_by("-depth", "id"))


def child_of(call_id: int) -> Frame | None:
    """The child frame a delegate call opened, if it got that far."""
    return Frame.objects.filter(parent_call_id=call_id).order_by("id").first()


def frame_by_id(frame_id: int) -> Frame:
    return Frame.objects.select_related("parent_call", "parent_call__frame").get(pk=frame_id)


def narrative_rows(frame: Frame, *kinds: str) -> list[dict[str, Any]]:
    """The payloads of a frame's own rows of ``kinds``, in seq order."""
    rows = SessionEvent.objects.filter(session_id=frame.session_id, exchange_id=frame.exchange_id,
                                       narrative=frame.narrative, kind__in=kinds).order_by("seq")
    return list(rows.values_list("payload", flat=True))


def ancestors(frame: Frame) -> list[int]:
    """The ids of the frames above ``frame``, nearest first."""
    found: list[int] = []
    call_id = frame.parent_call_id
    while call_id is not None:
        parent = Frame.objects.filter(tool_calls__pk=call_id).values("pk", "parent_call_id").first()
        if parent is None:
            break
        found.append(parent["pk"])
        call_id = parent["parent_call_id"]
    return found
