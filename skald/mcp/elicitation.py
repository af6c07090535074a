"""Elicitation: a server's ``elicitation/create`` during a call becomes a card for the session's owner.

The card is a durable row (:class:`~skald.mcp.models.McpElicitation`); the console shows it live
(a ``mcp.elicitation`` delta on the session's bus) and the admin lists it. The owner (or an admin)
answers through :func:`mcp_elicitation_answer` (the API and the admin call it); an accepted answer's
content must satisfy the requested schema. An unanswered card expires after
``SKALD_MCP_ELICITATION_TIMEOUT_SECONDS`` and the server is told ``decline``.

The waiting side (:func:`elicit`) runs on the MCP pool's event loop, never blocking it: the row's
writes and reads run on executor threads, and the wait is an ``asyncio.Event`` woken at once by an
answer committed in this process, or a poll of the row every :data:`POLL_SECONDS` for an answer
committed by another process (the API's web worker); the database decides, as everywhere.
Every request and every answer (expiry and cancellation included) is audited.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import jsonschema
from django.conf import settings
from django.db import connection, transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.models import Session
from loop.ports import TurnScope
from skald.core import clock
from skald.core.errors import Conflict, Forbidden, NotFound, SkaldError
from skald.mcp.calls import ElicitAnswer, ElicitRequest
from skald.mcp.models import McpElicitation, McpElicitationStatus

POLL_SECONDS = 1.0  # how soon an answer committed by another process is seen
ACTIONS = ("accept", "decline", "cancel")
_STATUS_OF = {"accept": McpElicitationStatus.ACCEPTED, "decline": McpElicitationStatus.DECLINED,
              "cancel": McpElicitationStatus.CANCELLED}
_ACTION_OF = {McpElicitationStatus.ACCEPTED: "accept", McpElicitationStatus.DECLINED: "decline",
              McpElicitationStatus.CANCELLED: "cancel", McpElicitationStatus.EXPIRED: "decline"}

_wakers: dict[int, Callable[[], None]] = {}
_wakers_lock = threading.Lock()


def elicitation_view(row: McpElicitation) -> dict[str, Any]:
    """What the console, the API and the bus show of a card."""
    return {"id": row.pk, "server": row.server, "tool": row.tool, "session": row.session_id,
            "exchange": row.exchange_id, "call": row.tool_call_id, "message": row.message,
            "requested_schema": row.requested_schema, "status": row.status, "answer": row.answer,
            "answered_by": row.answered_by, "created_at": row.created_at.isoformat(),
            "expires_at": row.expires_at.isoformat(),
            "answered_at": row.answered_at.isoformat() if row.answered_at else None}


def _announce(row: McpElicitation) -> None:
    """The card, live to the session's viewers (the console shows the answer form to its owner)."""
    from skald.loop_adapters.bus import ChannelsBus

    owner = Session.objects.filter(pk=row.session_id).values_list("owner_id", flat=True).first()
    ChannelsBus().delta(row.session_id, {"type": "mcp.elicitation", **elicitation_view(row), "owner": owner})


def elicitations_pending_for(*, user: Any, session_id: int) -> list[McpElicitation]:
    """The session's pending cards, for its owner or an admin (anyone else: none)."""
    session = Session.objects.filter(pk=session_id).only("owner_id").first()
    if session is None or not (getattr(user, "is_superuser", False) or session.owner_id == user.pk):
        return []
    return list(McpElicitation.objects.filter(session_id=session_id, status=McpElicitationStatus.PENDING)
                .order_by("created_at"))


def _settled(row: McpElicitation) -> None:
    """After the answer's commit: wake this process's waiter at once, and tell the viewers."""
    with _wakers_lock:
        wake = _wakers.get(row.pk)
    if wake is not None:
        wake()
    _announce(row)


def mcp_elicitation_open(*, server: str, tool: str, scope: TurnScope, call_id: int,
                         request: ElicitRequest) -> McpElicitation:
    """Record a server's request as a pending card for the session's owner (audited, announced)."""
    now = clock.now()
    with transaction.atomic():
        row = McpElicitation.objects.create(
            server=server, tool=tool[:120], session_id=scope.session_id, exchange_id=scope.exchange_id,
            tool_call_id=call_id, message=request.message[:4000], requested_schema=dict(request.schema),
            created_at=now, expires_at=now + timedelta(seconds=settings.SKALD_MCP_ELICITATION_TIMEOUT_SECONDS))
        audit_append(actor=Actor.system(f"mcp:{server}"[:64]), kind=AuditKind.MCP_ELICITATION_REQUESTED,
                     subject_type="mcp_elicitation", subject_id=row.pk,
                     payload={"server": server, "tool": row.tool, "session": scope.session_id,
                              "exchange": scope.exchange_id, "call": call_id, "message": row.message,
                              "requested_schema": row.requested_schema})
        transaction.on_commit(lambda: _announce(row))
    return row


def _may_answer(user: Any, row: McpElicitation) -> bool:
    if getattr(user, "is_superuser", False):
        return True
    owner = Session.objects.filter(pk=row.session_id).values_list("owner_id", flat=True).first()
    return owner is not None and owner == user.pk


def _check_content(schema: Mapping[str, Any], content: Any) -> dict[str, Any]:
    if not isinstance(content, dict):
        raise SkaldError("an accepted answer needs its content (an object)", code="mcp_elicitation_content_invalid")
    try:
        jsonschema.validate(content, dict(schema))
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "content"
        raise SkaldError(f"the answer does not fit the requested schema at {where}: {exc.message[:200]}",
                         code="mcp_elicitation_content_invalid") from None
    except jsonschema.SchemaError:
        raise SkaldError("the server's requested schema is not a valid JSON Schema",
                         code="mcp_elicitation_content_invalid") from None
    return content


def mcp_elicitation_answer(*, user: Any, elicitation_id: int, action: str,
                           content: Mapping[str, Any] | None = None) -> McpElicitation:
    """Answer a pending card: only the session's owner or an admin may.

    Raises:
        NotFound: ``mcp_elicitation_not_found``.
        Forbidden: ``mcp_elicitation_forbidden`` (not the session's owner, not an admin).
        SkaldError: ``mcp_elicitation_content_invalid`` (400): an accepted answer that does not fit the schema.
        Conflict: ``mcp_elicitation_settled`` (answered, expired or cancelled already).
    """
    if action not in ACTIONS:
        raise SkaldError("action must be accept, decline or cancel", code="mcp_elicitation_action_invalid")
    with transaction.atomic():
        row = McpElicitation.objects.select_for_update().filter(pk=elicitation_id).first()
        if row is None:
            raise NotFound("no such elicitation", code="mcp_elicitation_not_found")
        if not _may_answer(user, row):
            raise Forbidden("only the session's owner or an admin may answer", code="mcp_elicitation_forbidden")
        now = clock.now()
        if row.status == McpElicitationStatus.PENDING and row.expires_at <= now:
            # Too late: the expiry is recorded (and commits), the answer refused after the block.
            _settle(row, McpElicitationStatus.EXPIRED, Actor.system("skald"), now)
            transaction.on_commit(lambda: _settled(row))
        elif row.status == McpElicitationStatus.PENDING:
            row.answer = _check_content(row.requested_schema, content) if action == "accept" else None
            _settle(row, _STATUS_OF[action], Actor.user(user), now)
            transaction.on_commit(lambda: _settled(row))
            return row
    raise Conflict(f"the elicitation is {row.status} already", code="mcp_elicitation_settled", status=row.status)


def _settle(row: McpElicitation, status: str, actor: Actor, now: Any) -> None:
    row.status = status
    row.answered_by = f"{actor.type}:{actor.id}"[:64]
    row.answered_at = now
    row.save(update_fields=["status", "answer", "answered_by", "answered_at"])
    audit_append(actor=actor, kind=AuditKind.MCP_ELICITATION_ANSWERED, subject_type="mcp_elicitation",
                 subject_id=row.pk, payload={"server": row.server, "tool": row.tool, "session": row.session_id,
                                             "status": status, "answer": row.answer})


def mcp_elicitation_settle_due(*, elicitation_id: int) -> McpElicitation | None:
    """The card once settled: answered, or expired now when its time is up (None: still pending)."""
    row = McpElicitation.objects.filter(pk=elicitation_id).first()
    if row is None:
        return None
    if row.status != McpElicitationStatus.PENDING:
        return row
    now = clock.now()
    if row.expires_at > now:
        return None
    with transaction.atomic():
        row = McpElicitation.objects.select_for_update().get(pk=elicitation_id)
        if row.status == McpElicitationStatus.PENDING:
            _settle(row, McpElicitationStatus.EXPIRED, Actor.system("skald"), now)
            transaction.on_commit(lambda: _announce(row))
    return row


def mcp_elicitation_withdraw(*, elicitation_id: int) -> None:
    """The call ended while its card waited (a stop, the server gave up): the card is cancelled."""
    with transaction.atomic():
        row = McpElicitation.objects.select_for_update().filter(pk=elicitation_id).first()
        if row is not None and row.status == McpElicitationStatus.PENDING:
            _settle(row, McpElicitationStatus.CANCELLED, Actor.system("skald"), clock.now())
            transaction.on_commit(lambda: _announce(row))


def _own_connection(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run on an executor thread: its database connection closes after each use (these threads are
    the event loop's helpers, not request threads; nothing else closes it)."""
    try:
        return fn(*args, **kwargs)
    finally:
        connection.close()


async def elicit(*, server: str, tool: str, scope: TurnScope, call_id: int, request: ElicitRequest) -> ElicitAnswer:
    """Open a card and wait for its answer on the running event loop, without blocking it.

    A cancelled wait (a stop cancels the call) withdraws the card.
    """
    loop = asyncio.get_running_loop()
    row = await loop.run_in_executor(None, lambda: _own_connection(
        mcp_elicitation_open, server=server, tool=tool, scope=scope, call_id=call_id, request=request))
    woken = asyncio.Event()

    def wake() -> None:
        loop.call_soon_threadsafe(woken.set)

    with _wakers_lock:
        _wakers[row.pk] = wake
    try:
        while True:
            woken.clear()
            settled = await loop.run_in_executor(None, lambda: _own_connection(
                mcp_elicitation_settle_due, elicitation_id=row.pk))
            if settled is not None:
                return ElicitAnswer(action=_ACTION_OF.get(settled.status, "decline"),
                                    content=settled.answer if settled.status == McpElicitationStatus.ACCEPTED
                                    else None)
            try:
                await asyncio.wait_for(woken.wait(), POLL_SECONDS)
            except TimeoutError:
                pass
    except asyncio.CancelledError:
        loop.run_in_executor(None, lambda: _own_connection(mcp_elicitation_withdraw, elicitation_id=row.pk))
        raise
    finally:
        with _wakers_lock:
            _wakers.pop(row.pk, None)
