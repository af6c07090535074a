"""Liveness is progress (issue 28): with work due, some worker must have started a task within
``SKALD_WORKERS_STALL_SECONDS`` or still be busy with one, else readiness says ``workers: wedged``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from loop.models import Work
from skald import readiness
from skald.models import WorkerBeat
from skald.workers import worker_task_ended, worker_task_started, workers_progress

pytestmark = pytest.mark.django_db

STALL = 15
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def stall_bound(settings):
    settings.SKALD_WORKERS_STALL_SECONDS = STALL
    settings.SKALD_TASK_TIMEOUT = 900


def _work_due_at(when) -> Work:
    return Work.objects.create(key=f"drive:{when.timestamp()}", task="skald.tasks.run_kernel_turn", args=[1],
                               created_at=when, due_at=when)


def test_it_is_ok_when_nothing_is_due_even_if_no_worker_ever_started_a_task():
    with time_machine.travel(T0, tick=False):
        assert workers_progress() == "ok"


def test_it_is_ok_while_due_work_is_younger_than_the_bound():
    _work_due_at(T0)
    with time_machine.travel(T0 + timedelta(seconds=STALL - 1), tick=False):
        assert workers_progress() == "ok"


def test_it_is_wedged_when_work_waited_past_the_bound_and_no_worker_started_a_task():
    with time_machine.travel(T0, tick=False):
        worker_task_started(worker="host-a:11", timeout_seconds=900)
        worker_task_ended(worker="host-a:11")
    _work_due_at(T0 + timedelta(seconds=1))
    with time_machine.travel(T0 + timedelta(seconds=STALL + 2), tick=False):
        assert workers_progress() == "wedged"


def test_a_task_started_on_any_machine_within_the_bound_is_progress():
    _work_due_at(T0)
    with time_machine.travel(T0 + timedelta(seconds=STALL), tick=False):
        worker_task_started(worker="host-b:42", timeout_seconds=900)
        worker_task_ended(worker="host-b:42")
    with time_machine.travel(T0 + timedelta(seconds=STALL + 5), tick=False):
        assert workers_progress() == "ok"


def test_workers_busy_with_long_tasks_are_saturated_not_wedged():
    with time_machine.travel(T0, tick=False):
        worker_task_started(worker="host-a:11", timeout_seconds=900)  # a long turn, still running
        _work_due_at(T0)
    with time_machine.travel(T0 + timedelta(seconds=300), tick=False):
        assert workers_progress() == "ok"
    with time_machine.travel(T0 + timedelta(seconds=901), tick=False):  # past any task's timeout
        assert workers_progress() == "wedged"


def test_a_new_worker_process_drops_the_rows_of_workers_long_gone():
    with time_machine.travel(T0, tick=False):
        worker_task_started(worker="old:1", timeout_seconds=900)
        worker_task_ended(worker="old:1")
    with time_machine.travel(T0 + timedelta(days=2), tick=False):
        worker_task_started(worker="new:2", timeout_seconds=900)
        worker_task_started(worker="new:2", timeout_seconds=900)  # the same process: one row
    assert list(WorkerBeat.objects.values_list("worker", flat=True)) == ["new:2"]


def test_readyz_answers_503_with_workers_wedged(client, monkeypatch):
    monkeypatch.setattr(readiness, "_serving_clusters", lambda: 1)
    _work_due_at(timezone.now() - timedelta(seconds=STALL + 5))
    response = client.get("/readyz")
    assert (response.status_code, response.json()["workers"], response.json()["status"]) == (503, "wedged", "not_ready")
    worker_task_started(worker="host-a:11", timeout_seconds=900)
    response = client.get("/readyz")
    assert (response.status_code, response.json()["workers"]) == (200, "ok")


def test_the_liveness_command_exits_1_when_wedged():
    call_command("skald_liveness")
    _work_due_at(timezone.now() - timedelta(seconds=STALL + 5))
    with pytest.raises(CommandError, match="wedged") as failed:
        call_command("skald_liveness")
    assert failed.value.returncode == 1
