"""OpenTelemetry traces with the GenAI semantic conventions (issue 33, docs/observability.md).

:func:`configure` runs once per process (``SkaldConfig.ready``). With no OTLP endpoint in the
environment (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``) it returns
at once: the OpenTelemetry SDK is never imported and the kernel keeps its no-op tracer
(``loop.tracing.NOOP``). With one, :mod:`skald.tracing.otel` installs a tracer provider configured
by the standard ``OTEL_*`` variables, exporting OTLP over HTTP/protobuf through the SDK's batch
span processor, and routes the kernel's spans to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from skald.core.env import envbool

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["CAPTURE_VARIABLE", "configure", "endpoint_configured"]

CAPTURE_VARIABLE = "SKALD_OTEL_CAPTURE_CONTENT"


def endpoint_configured(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment names somewhere to send traces (and the SDK is not disabled)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure(*, exporter: SpanExporter | None = None, env: Mapping[str, str] = os.environ,
              capture: bool | None = None) -> bool:
    """Install tracing when configured; True when it is on.

    Args:
        exporter: a span exporter to use instead of OTLP/HTTP (tests: the SDK's in-memory one);
            it turns tracing on whatever the environment says, with a simple (synchronous) processor.
        env: the environment read for the ``OTEL_*`` variables and ``SKALD_OTEL_CAPTURE_CONTENT``.
        capture: content capture, overriding ``SKALD_OTEL_CAPTURE_CONTENT``.
    """
    if exporter is None and not endpoint_configured(env):
        return False
    from skald.tracing import otel  # the SDK is imported only here, only when tracing is on

    otel.install(exporter=exporter, capture=envbool(CAPTURE_VARIABLE, False, env) if capture is None else capture)
    return True
