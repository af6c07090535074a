"""The one exception handler: every API error body is ``{"code", "message", "extra"}``."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from skald.core.errors import SkaldError
from skald.core.saturation import busy_body, busy_headers, saturation_of

logger = logging.getLogger(__name__)


def error_body(code: str, message: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "extra": extra or {}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """Map every exception raised under DRF to the stable error body."""
    busy = saturation_of(exc)  # backpressure: a bounded wait ran out (503 + Retry-After), not a bug
    if busy is not None:
        return Response(busy_body(busy), status=busy.http_status, headers=busy_headers(busy))
    if isinstance(exc, SkaldError):
        return Response(error_body(exc.code, exc.message, exc.extra), status=exc.http_status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        logger.exception("unhandled API error", exc_info=exc)
        return Response(
            error_body("internal_error", "An internal error occurred."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    if isinstance(exc, exceptions.ValidationError):
        fields = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        response.data = error_body("invalid", "Invalid input.", {"fields": fields})
        return response
    assert isinstance(exc, exceptions.APIException)
    detail = exc.detail
    code = getattr(exc, "default_code", "error")
    if isinstance(detail, dict):
        code = str(detail.get("code", code))
        message = str(detail.get("detail", exc.default_detail))
        extra = {k: v for k, v in detail.items() if k not in {"detail", "code"}}
    else:
        code = getattr(detail, "code", None) or code
        message = str(detail)
        extra = {}
    response.data = error_body(str(code), message, extra)
    return response
