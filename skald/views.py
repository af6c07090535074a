"""Plain probe views: parse nothing, delegate to readiness and metrics."""

from __future__ import annotations

import hmac
import sys

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.http import require_GET

from skald import metrics
from skald.core.api.exceptions import error_body
from skald.core.saturation import busy_body, busy_headers, saturation_of
from skald.readiness import readiness_report


@require_GET
def landing(request: HttpRequest) -> HttpResponseRedirect:
    """``/``: Skald's home is the admin (it sends a visitor to its login first)."""
    return HttpResponseRedirect(reverse("admin:index"))


@require_GET
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """Browsers ask for ``/favicon.ico`` before reading a page's ``<link rel=icon>``."""
    return HttpResponseRedirect(static("skald/favicon.svg"))


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    ready, body = readiness_report()
    return JsonResponse(body, status=200 if ready else 503)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.SKALD_METRICS_TOKEN
    if token:
        supplied = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(supplied.encode(), token.encode()):
            return JsonResponse(error_body("not_authenticated", "A metrics token is required."), status=401)
    return HttpResponse(metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8")


def api_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith(("/api/", "/workflow/")):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception or Exception("not found"))


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler403``: JSON under the API prefixes; the admin's layout, naming the missing role, elsewhere."""
    if request.path.startswith(("/api/", "/workflow/")):
        return JsonResponse(error_body("permission_denied", "You do not have permission to perform this action."),
                            status=403)
    from skald.admin.denied import admin_permission_denied

    return admin_permission_denied(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django calls it while the uncaught exception is being handled, from any
    layer (middleware included). A saturated pool or queue answers 503 with Retry-After."""
    exc = sys.exc_info()[1]
    busy = saturation_of(exc) if exc is not None else None
    if busy is not None:
        return JsonResponse(busy_body(busy), status=busy.http_status, headers=busy_headers(busy))
    if request.path.startswith(("/api/", "/workflow/")):
        return JsonResponse(error_body("internal_error", "An internal error occurred."), status=500)
    from django.views.defaults import server_error as default_server_error

    return default_server_error(request)

