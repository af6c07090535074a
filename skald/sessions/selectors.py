"""Session reads, scoped to what the user may see: their own sessions, or all for operators."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from loop.models import Exchange, Session, SessionEvent
from skald.core.errors import NotFound
from skald.core.roles import Role, has_role

# Every role may hold conversations; a user without one may not (REST 403, websocket 4403).
SESSION_ROLES = (Role.OPERATOR, Role.APPROVER, Role.REVIEWER, Role.AUDITOR, Role.WORKFLOW)


def may_converse(user: AbstractBaseUser) -> bool:
    return has_role(user, *SESSION_ROLES)


def sessions_visible_to(user: AbstractBaseUser) -> QuerySet[Session]:
    """Operators see every session; approvers also every session that parked a call for approval
    (so they can answer on its card); everyone their own."""
    sessions = Session.objects.all()
    if has_role(user, Role.OPERATOR):
        return sessions
    if has_role(user, Role.APPROVER):
        # A lookup through the reverse relation by name: the product core imports no feature.
        return sessions.filter(Q(owner_id=user.pk) | Q(approvals__isnull=False)).distinct()
    return sessions.filter(owner_id=user.pk)


def session_get(*, user: AbstractBaseUser, session_id: int) -> Session:
    session = sessions_visible_to(user).filter(pk=session_id).first()
    if session is None:
        raise NotFound("No such session.", code="session_not_found")
    return session


def exchange_get(*, session: Session, exchange_id: int) -> Exchange:
    exchange = Exchange.objects.filter(session=session, pk=exchange_id).first()
    if exchange is None:
        raise NotFound("No such exchange.", code="exchange_not_found")
    return exchange


def events_after(*, session: Session, after: int, limit: int) -> list[SessionEvent]:
    return list(SessionEvent.objects.filter(session=session, seq__gt=after).order_by("seq")[:limit])
