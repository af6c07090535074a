"""Who may do what with a session: the one access rule REST and the websocket both ask.

The model (docs/access-model.md):

- every role but a lone ``auditor`` may **create** sessions and **write** (send messages) to them;
- a session is **written to** by its owner only, never by anyone else, operators included: the
  turn then runs under the writer's own security groups and the writer is the audit actor, so no
  path runs one user's message under another user's groups;
- a session is **read** by its owner, for oversight by operators and auditors (read-only), and by
  approvers when it asked for an approval (so they can decide on its card with its context);
- a session is **stopped** by its owner, and for oversight by operators; the stop's audit actor is
  whoever stopped it. Stopping runs nothing, so it borrows nobody's permissions.

A session the caller may not read does not exist for them (404 ``session_not_found``, websocket
4404); one they may read but not write or stop answers 403 with a stable code.
"""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q, QuerySet

from loop.models import Session
from skald.core.errors import Forbidden, NotFound
from skald.core.roles import Role, has_role

# A user holding none of these may not use sessions at all (REST 403, websocket 4403).
SESSION_ROLES = (Role.OPERATOR, Role.APPROVER, Role.REVIEWER, Role.AUDITOR, Role.WORKFLOW)
# Roles that may hold their own conversations (and so run tools): the auditor only reads.
CONVERSING_ROLES = (Role.OPERATOR, Role.APPROVER, Role.REVIEWER, Role.WORKFLOW)
# Oversight: who may read, and who may stop, other users' sessions.
READ_ANY_ROLES = (Role.OPERATOR, Role.AUDITOR)
STOP_ANY_ROLES = (Role.OPERATOR,)


class SessionAction(StrEnum):
    READ = "read"
    WRITE = "write"
    STOP = "stop"


def may_use_sessions(user: AbstractBaseUser) -> bool:
    """Holds a role that reaches the session routes at all."""
    return has_role(user, *SESSION_ROLES)


def may_create_session(user: AbstractBaseUser) -> bool:
    return has_role(user, *CONVERSING_ROLES)


def may(user: AbstractBaseUser, action: SessionAction, session: Session) -> bool:
    """The access rule for one action on one session (the table in docs/access-model.md)."""
    own = session.owner_id is not None and session.owner_id == user.pk
    if action == SessionAction.READ:
        return ((own and may_use_sessions(user)) or has_role(user, *READ_ANY_ROLES)
                or (has_role(user, Role.APPROVER) and _asked_for_approval(session)))
    if action == SessionAction.WRITE:
        return own and has_role(user, *CONVERSING_ROLES)
    return (own and has_role(user, *CONVERSING_ROLES)) or has_role(user, *STOP_ANY_ROLES)


def sessions_readable_by(user: AbstractBaseUser) -> QuerySet[Session]:
    """The sessions ``user`` may read: their own, every session for the oversight roles, and for an
    approver every session that asked for an approval."""
    sessions = Session.objects.all()
    if has_role(user, *READ_ANY_ROLES):
        return sessions
    if not may_use_sessions(user):
        return sessions.none()
    if has_role(user, Role.APPROVER):
        # The reverse relation by name: the product core imports no feature.
        return sessions.filter(Q(owner_id=user.pk) | Q(approvals__isnull=False)).distinct()
    return sessions.filter(owner_id=user.pk)


def _asked_for_approval(session: Session) -> bool:
    return Session.objects.filter(pk=session.pk, approvals__isnull=False).exists()


def session_for(*, user: AbstractBaseUser, session_id: int, action: SessionAction) -> Session:
    """The session ``user`` may ``action``.

    Raises:
        NotFound: ``session_not_found`` — no such session, or one the user may not read.
        Forbidden: ``session_write_forbidden`` / ``session_stop_forbidden`` — readable, not theirs to act on.
    """
    # An id beyond a 64-bit key names nothing (and overflows SQLite's integer binding).
    session = sessions_readable_by(user).filter(pk=session_id).first() if 0 < session_id < 2**63 else None
    if session is None:
        raise NotFound("No such session.", code="session_not_found")
    if not may(user, action, session):
        raise Forbidden(f"Only the session's owner may {action.value} it" +
                        (" (operators may stop any session)." if action == SessionAction.STOP else "."),
                        code=f"session_{action.value}_forbidden")
    return session
