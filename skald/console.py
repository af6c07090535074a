"""The console page (SPEC O4): a conversation streamed over Channels, approval cards with diff
previews, a stop button. The page is static; everything it shows comes from the REST API and the
session websocket, with the browser's session cookie (CSRF on). The page only needs to know what
the viewer may do, so cards match the role (an approver answers, everyone else sees who will)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from skald.core.roles import Role, has_role, user_roles
from skald.models import Case, CaseStatus


@login_required
@ensure_csrf_cookie
def console(request: HttpRequest) -> HttpResponse:
    roles = sorted(user_roles(request.user))
    cases = list(Case.objects.filter(status=CaseStatus.OPEN).order_by("-id").values("id", "title")[:50]) \
        if has_role(request.user, Role.OPERATOR) else []
    return render(request, "skald/console.html", {
        "username": request.user.get_username(), "roles": roles,
        "can_resolve": has_role(request.user, Role.APPROVER), "cases": cases,
        "user_id": request.user.pk, "four_eyes": settings.SKALD_FOUR_EYES,
    })
