"""The kernel's fixtures (the real store, in-memory ports), so real kernel turns can be traced here,
and ``spans``: tracing on, every ended span in the SDK's in-memory exporter."""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from skald.tracing import configure, otel
from tests.loop.conftest import alice, audit, bus, clock, make_env, session, store  # noqa: F401
from tests.loop.providers.conftest import make_profile, make_provider, resolver, secret_root, server  # noqa: F401


@contextmanager
def recorded(*, capture: bool) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process for the block, every span into the SDK's in-memory exporter."""
    exporter = InMemorySpanExporter()
    configure(exporter=exporter, capture=capture)
    try:
        yield exporter
    finally:
        otel.shutdown()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded(capture=False) as exporter:
        yield exporter
