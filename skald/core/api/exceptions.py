"""The one exception handler: every API error body is ``{"code", "message", "extra"}``."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
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
    refused = bad_input(exc)
    if refused is not None:
        return refused
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
        named: dict[str, Any] = {str(k): v for k, v in detail.items()}
        code = str(named.get("code", code))
        message = str(named.get("detail", exc.default_detail))
        extra = {k: v for k, v in named.items() if k not in {"detail", "code"}}
    else:
        code = getattr(detail, "code", None) or code
        message = str(detail)
        extra = {}
    response.data = error_body(str(code), message, extra)
    return response


def bad_input(exc: Exception) -> Response | None:
    """Exceptions that only malformed input raises, answered 4xx (the request guard refuses most
    of them before a view runs; these catch what a view parses itself)."""
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("request_too_large", "The request body is too large."), status=413)
    if isinstance(exc, RecursionError):  # json.loads of a deeply nested document
        return Response(error_body("json_too_deep", "The JSON nests too deeply."), status=400)
    if isinstance(exc, OverflowError):  # SQLite binds integers up to 2**63 - 1
        return Response(error_body("out_of_range", "A number is out of range."), status=400)
    if isinstance(exc, UnicodeError):  # a lone surrogate meeting an encoder
        return Response(error_body("invalid_unicode", "The input is not valid Unicode."), status=400)
    return None
