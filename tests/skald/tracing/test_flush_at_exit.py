"""Spans still in the batch leave with a process that ends in order (issue 33): a forked worker that
finishes (django-q2's: ``os._exit`` after its loop, no ``atexit``) and one stopped by SIGTERM both
send what they held to a real OTLP/HTTP receiver, although the batch's schedule is an hour away."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from multiprocessing.synchronize import Event

import pytest

from bench.otlp_receiver import OtlpReceiver, ReceivedSpan
from loop import tracing
from skald.tracing import configure, otel

FORK = multiprocessing.get_context("fork")  # as django-q2 starts its workers


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """Tracing on, exporting to a real receiver, with a batch that is never sent on its schedule."""
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000")
        assert configure()
        try:
            yield receiver
        finally:
            otel.shutdown()


def _work(name: str, ended: Event | None = None) -> None:
    tracing.tracer.start(name, {"skald.exchange.id": 1}).end()
    if ended is not None:
        ended.set()
        time.sleep(60)  # a worker waiting for its next task when the SIGTERM comes


def arrived(receiver: OtlpReceiver, name: str) -> list[ReceivedSpan]:
    return [s for s in receiver.received() if s.name == name]


def test_a_forked_worker_that_ends_sends_its_batch(held):
    worker = FORK.Process(target=_work, args=("worker span",))
    worker.start()
    worker.join(30)
    assert worker.exitcode == 0
    assert [s.attributes["skald.exchange.id"] for s in arrived(held, "worker span")] == [1]


def test_a_worker_stopped_by_sigterm_sends_its_batch_then_dies_of_the_signal(held):
    ended = FORK.Event()
    worker = FORK.Process(target=_work, args=("terminated span", ended))
    worker.start()
    assert ended.wait(30)
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(30)
    assert worker.exitcode == -signal.SIGTERM  # what a SIGTERM does, with the batch sent first
    assert len(arrived(held, "terminated span")) == 1
