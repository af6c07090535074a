"""Log records carry the current span's ``trace_id`` and ``span_id`` while tracing is on.

:class:`TraceContextFilter` sets both attributes (empty strings outside a span) so a formatter may
name them (``%(trace_id)s``); :func:`install_log_context` adds it to every handler of the root
logger, which every Skald logger propagates to.
"""

from __future__ import annotations

import logging

from skald.tracing.context import CURRENT


class TraceContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        current = CURRENT.get()
        if current is not None:
            record.trace_id, record.span_id = f"{current.trace_id:032x}", f"{current.span_id:016x}"
        else:
            record.trace_id = record.span_id = ""
        return True


def install_log_context() -> None:
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, TraceContextFilter) for f in handler.filters):
            handler.addFilter(TraceContextFilter())
