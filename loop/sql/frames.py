"""Child frames (SPEC S1): one row opened per delegate, closed once with its outcome."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from loop.models import Frame, FrameStatus


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
