"""The console page (SPEC O4): a conversation streamed over Channels, approval cards with diff
previews, a stop button. The page is static; everything it shows comes from the REST API and the
session websocket, with the browser's session cookie (CSRF on)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie


@login_required
@ensure_csrf_cookie
def console(request: HttpRequest) -> HttpResponse:
    return render(request, "skald/console.html", {"username": request.user.get_username()})
