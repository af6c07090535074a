"""Domain errors with a stable code, an HTTP status and data fields (the zulip ``JsonableError`` shape).

The one exception handler (:mod:`skald.core.api.exceptions`) renders them as
``{"code": ..., "message": ..., "extra": {...}}``.
"""

from __future__ import annotations

from typing import Any


class SkaldError(Exception):
    code: str = "error"
    http_status: int = 400

    def __init__(
        self, message: str, *, code: str | None = None, http_status: int | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if http_status is not None:
            self.http_status = http_status
        self.extra: dict[str, Any] = extra


class NotFound(SkaldError):
    code = "not_found"
    http_status = 404


class Conflict(SkaldError):
    code = "conflict"
    http_status = 409


class Forbidden(SkaldError):
    code = "permission_denied"
    http_status = 403
