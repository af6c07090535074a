"""Session reads below the access rule: who may read which session is :mod:`skald.sessions.access`."""

from __future__ import annotations

from loop.models import Exchange, Session, SessionEvent
from skald.core.errors import NotFound


def exchange_get(*, session: Session, exchange_id: int) -> Exchange:
    exchange = Exchange.objects.filter(session=session, pk=exchange_id).first()
    if exchange is None:
        raise NotFound("No such exchange.", code="exchange_not_found")
    return exchange


def events_after(*, session: Session, after: int, limit: int) -> list[SessionEvent]:
    return list(SessionEvent.objects.filter(session=session, seq__gt=after).order_by("seq")[:limit])
