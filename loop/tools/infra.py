"""Which failures inside a tool are the infrastructure's, not the tool's.

A tool whose database connection dropped or whose pool had no connection to give did not fail in a
way the model can reason about: the same call would succeed a minute later. Such an exception
breaks the exchange with :class:`loop.errors.InfrastructureError` (the call stays ``running`` for
recovery to resolve, SPEC R1) and never becomes a ``tool_result``.
A tool may also say so itself by raising :class:`ToolInfrastructureFailure`: the remote server
behind it (an MCP server) could not be reached, died or broke its transport, so no result exists
(never a silent empty one).
A remote side that failed *after* the call was sent is another case: the call may have taken effect.
A tool says so by raising :class:`ToolOutcomeUnknown`; the call then ends ``interrupted`` with a
result the model reads (the outcome is unknown and the call was not retried), exactly as a call a
crash interrupted, and the exchange goes on.
Everything else a tool raises stays model-visible. Django's ``OperationalError`` (connection lost,
server shutting down, pool timeout) and ``InterfaceError`` (connection already closed) are
infrastructure; ``IntegrityError``, ``DataError`` and ``ProgrammingError`` are about the data or
the code, so the model reads them.
"""

from __future__ import annotations

from django.db import InterfaceError, OperationalError


class ToolInfrastructureFailure(Exception):
    """Raised by a tool whose remote infrastructure failed (not the tool's own error)."""


class ToolOutcomeUnknown(Exception):
    """Raised by a tool whose remote side failed after the call was sent (an MCP server that died
    mid-call): whether the call took effect is unknown, so it must not be made again blindly."""


INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (OperationalError, InterfaceError, ToolInfrastructureFailure)


def is_infrastructure_error(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, is an infrastructure failure."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        if isinstance(current, INFRASTRUCTURE_ERRORS):
            return True
        current, seen = current.__cause__, seen + 1
    return False
