"""The console page (SPEC O4): a conversation streamed over Channels, approval cards with diff
previews, a stop button. The page is static; everything it shows comes from the REST API and the
session websocket, with the browser's session cookie (CSRF on). The page only needs to know what
the viewer may do, so cards match the role (an approver answers, everyone else sees who will) and
the controls match the session access rule (skald.sessions.access): who may not start a session or
send a message sees no New session or Send, and a sentence that says why."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from skald.core.roles import Role, has_role, user_roles
from skald.models import Case, CaseStatus
from skald.sessions.access import CONVERSING_ROLES, STOP_ANY_ROLES, may_create_session, may_use_sessions


@login_required
@ensure_csrf_cookie
def console(request: HttpRequest) -> HttpResponse:
    user = request.user
    assert isinstance(user, AbstractBaseUser)  # login_required let no anonymous visitor in
    roles = sorted(user_roles(user))
    cases = list(Case.objects.filter(status=CaseStatus.OPEN).order_by("-id").values("id", "title")[:50]) \
        if has_role(user, Role.OPERATOR) else []
    can_converse = may_create_session(user)
    return render(request, "skald/console.html", {
        "username": user.get_username(), "roles": roles,
        "can_resolve": has_role(user, Role.APPROVER), "cases": cases,
        "can_converse": can_converse, "can_stop_any": has_role(user, *STOP_ANY_ROLES),
        "read_only_reason": "" if can_converse else read_only_reason(may_use_sessions(user)),
        "user_id": user.pk, "four_eyes": settings.SKALD_FOUR_EYES,
    })


def read_only_reason(may_read: bool) -> str:
    """Why the viewer sees no New session and no Send: one sentence naming the roles that would."""
    needed = ", ".join(role.value for role in CONVERSING_ROLES[:-1]) + f" or {CONVERSING_ROLES[-1].value}"
    if may_read:
        return f"You can read sessions; starting one or sending a message needs the {needed} role."
    return f"Your account holds no role that uses sessions; starting one or sending a message needs the {needed} role."
