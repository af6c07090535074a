"""The request guard: malformed input is answered with a JSON 4xx before any view runs.

One middleware, early in ``MIDDLEWARE``, for every route (docs/api-limits.md):

- a query string over ``SKALD_MAX_QUERY_BYTES`` → 414 ``uri_too_long``;
- a NUL or a lone surrogate in the path or in any query value → 400 (``nul_character``,
  ``invalid_unicode``);
- under ``/api/`` and ``/workflow/``: an unknown path → 404 ``not_found`` (JSON, also with
  ``DEBUG`` on: Django's debug page lists every URL pattern); a path id ≥ 2**63 → 404;
- a body over the route's limit (``SKALD_BODY_LIMITS``, by URL name, else ``default``) → 413
  ``request_too_large``, read no further than the limit;
- a JSON body nested too deep, holding a NUL or a lone surrogate, or not UTF-8 → 400 (see
  :mod:`skald.core.api.input_checks`);
- any other error answered under the API prefixes that is not JSON (Django's HTML 400/403/405/500
  pages) is rewritten to the ``{code, message, extra}`` body with the same status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve

from skald.core.api.exceptions import error_body
from skald.core.api.input_checks import json_loads_checked, text_check
from skald.core.errors import SkaldError
from skald.core.saturation import busy_body, busy_headers, saturation_of

logger = logging.getLogger(__name__)

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_ID = 2**63 - 1
# Codes for errors Django or a server answered before (or outside) our exception handler.
STATUS_CODES = {400: "bad_request", 401: "not_authenticated", 403: "permission_denied", 404: "not_found",
                405: "method_not_allowed", 406: "not_acceptable", 408: "request_timeout",
                413: "request_too_large", 414: "uri_too_long", 415: "unsupported_media_type",
                429: "throttled", 500: "internal_error", 502: "bad_gateway", 503: "unavailable"}


def refusal(status: int, code: str, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse(error_body(code, message, extra), status=status)


class RequestGuardMiddleware:
    """Refuses malformed requests with a stable JSON error; makes every API error JSON."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.prefixes: tuple[str, ...] = tuple(settings.SKALD_API_PREFIXES)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path.startswith(self.prefixes)
        try:
            refused = self._refuse(request, api=api)
        except SkaldError as exc:
            refused = refusal(exc.http_status, exc.code, exc.message, **exc.extra)
        if refused is not None:
            return refused
        response = self.get_response(request)
        return self._as_json(response) if api else response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """A non-DRF view under the API prefixes that raises still answers the JSON body."""
        if not request.path.startswith(self.prefixes):
            return None
        busy = saturation_of(exception)  # a saturated resource or a lost database: 503 + Retry-After
        if busy is not None:
            return JsonResponse(busy_body(busy), status=busy.http_status, headers=busy_headers(busy))
        if isinstance(exception, SkaldError):
            return refusal(exception.http_status, exception.code, exception.message, **exception.extra)
        logger.exception("unhandled error on %s", request.path, exc_info=exception)
        return refusal(500, "internal_error", "An internal error occurred.")

    # --- before the view --------------------------------------------------------------------------

    def _refuse(self, request: HttpRequest, *, api: bool) -> HttpResponse | None:
        raw_query = request.META.get("QUERY_STRING", "")
        if len(raw_query.encode("utf-8", "surrogatepass")) > settings.SKALD_MAX_QUERY_BYTES:
            return refusal(414, "uri_too_long", f"The query string is over {settings.SKALD_MAX_QUERY_BYTES} bytes.",
                           limit=settings.SKALD_MAX_QUERY_BYTES)
        text_check(request.path, where="path")
        for key, value in parse_qsl(raw_query, keep_blank_values=True, errors="surrogateescape"):
            text_check(key, where="query")
            text_check(value, where=f"query parameter {key[:40]!r}")
        if not api:
            return None
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return refusal(404, "not_found", "Not found.")
        if any(isinstance(value, int) and not 0 <= value <= MAX_ID for value in match.kwargs.values()):
            return refusal(404, "not_found", "Not found.")
        if request.method in BODY_METHODS:
            return self._refuse_body(request, route=match.url_name or "")
        return None

    def _refuse_body(self, request: HttpRequest, *, route: str) -> HttpResponse | None:
        limits: dict[str, int] = settings.SKALD_BODY_LIMITS
        limit = limits.get(route, limits["default"])
        too_large = refusal(413, "request_too_large", f"The request body is over {limit} bytes for this route.",
                            limit=limit)
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return refusal(400, "bad_request", "Content-Length is not a number.")
        if declared > limit:
            return too_large
        try:
            body = request.body
        except RequestDataTooBig:
            return too_large
        if len(body) > limit:  # a chunked body declares no length
            return too_large
        if body and request.content_type == "application/json":
            json_loads_checked(body)  # DRF parses it again; bodies are small (the limit above)
        return None

    # --- after the view -----------------------------------------------------------------------------

    def _as_json(self, response: HttpResponse) -> HttpResponse:
        if response.status_code < 400 or "json" in response.get("Content-Type", ""):
            return response
        status = response.status_code
        rewritten = refusal(status, STATUS_CODES.get(status, "error"), response.reason_phrase or "Error.")
        for header in ("Allow", "WWW-Authenticate", "Retry-After"):
            if header in response:
                rewritten[header] = response[header]
        return rewritten

