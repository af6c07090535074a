"""Tool-call rows (``loop_toolcall``): their insertion at a message end and their state machine."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from loop.models import ToolCall
from loop.sql import Cursor, json_param, when
from loop.sql.batch import Write


def insert_tool_call(cursor: Cursor, values: Sequence[Any]) -> int:
    """``values``: session, exchange, frame, turn, index, key, provider id, tool, arguments (JSON text),
    arguments hash, status, created/updated time."""
    cursor.execute(
        "INSERT INTO loop_toolcall (session_id, exchange_id, frame_id, turn, \"index\", call_key, provider_call_id, "
        f"tool, arguments, arguments_hash, status, result, is_error, created_at, updated_at) VALUES (%s, %s, %s, %s, "
        f"%s, %s, %s, %s, {json_param()}, %s, %s, '', %s, %s, %s) RETURNING id",
        [*values[:11], False, when(values[11]), when(values[11])],
    )
    return int(cursor.fetchone()[0])


def set_call_state(call_id: int, *, status: str, result: str, is_error: bool, now: datetime) -> Write:
    """The call's whole state (a later one of the same transaction replaces it)."""
    return Write(("call", call_id),
                 "UPDATE loop_toolcall SET status = %s, result = %s, is_error = %s, updated_at = %s WHERE id = %s",
                 [status, result, is_error, when(now), call_id], supersedes=True)


def transition_if(call_id: int, from_status: str, to_status: str, now: datetime) -> bool:
    """A conditional state change: exactly one actor moves a call out of ``from_status``."""
    return ToolCall.objects.filter(pk=call_id, status=from_status).update(status=to_status, updated_at=now) == 1


def call_by_id(call_id: int) -> ToolCall:
    return ToolCall.objects.select_related("frame").get(pk=call_id)


def calls_in_states(exchange_id: int, statuses: Iterable[str]) -> list[ToolCall]:
    """An exchange's calls in ``statuses``, with their frames, in creation order."""
    return list(ToolCall.objects.filter(exchange_id=exchange_id, status__in=list(statuses))
                .select_related("frame").order_by("id"))


def count_in_state(exchange_id: int, status: str) -> int:
    return ToolCall.objects.filter(exchange_id=exchange_id, status=status).count()
