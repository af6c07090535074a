"""``GET /api/{source}/tasks`` and the task cancel route (SPEC S5): the caller's running tasks plus
failures of the last 30 minutes, paginated, with the API's error conventions."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from skald.core import clock
from skald.jobs.classify import Ending
from skald.jobs.models import JobStatus, RunEnding, ScheduledJob
from skald.jobs.services import job_run_finish, job_run_start, job_submit_task
from skald.sessions.services import session_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def submit(user, session, task: str = "look") -> ScheduledJob:
    return job_submit_task(owner_id=user.pk, source=session.source, parent_session_id=session.pk,
                           parent_exchange_id=None, parent_call_id=None, agent="log-analyst", task=task,
                           tools=["read_logs"], client="", selection={"rule": "auto:strength"}, scope_extras={})


def end(job: ScheduledJob, status: str) -> None:
    run = job_run_start(job_id=job.pk)
    assert run is not None
    job_run_finish(run_id=run.pk, ending=Ending(status, "x", "it broke" if status == RunEnding.FAILED else ""))


@pytest.fixture
def jobs(alice, agents):
    session = session_create(user=alice, agent="troubleshooter")
    queued, running, failed, succeeded = (submit(alice, session, name) for name in ("q", "r", "f", "s"))
    job_run_start(job_id=running.pk)
    end(failed, RunEnding.FAILED)
    end(succeeded, RunEnding.SUCCEEDED)
    return {"queued": queued, "running": running, "failed": failed, "succeeded": succeeded, "session": session}


def test_it_lists_running_tasks_and_recent_failures_but_not_successes(alice, api, jobs):
    response = api(alice).get("/api/web/tasks")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["count"] == 3
    rows = {row["task"]: row for row in body["results"]}
    assert set(rows) == {"q", "r", "f"}
    assert rows["f"]["run"]["status"] == "failed" and rows["f"]["run"]["error"] == "it broke"
    assert rows["r"]["status"] == JobStatus.RUNNING and rows["r"]["child_session"] is not None


def test_failures_older_than_thirty_minutes_drop_out(alice, api, jobs):
    with time_machine.travel(clock.now() + timedelta(minutes=31), tick=False):
        rows = api(alice).get("/api/web/tasks").json()["results"]
    assert {row["task"] for row in rows} == {"q", "r"}


def test_it_pages_and_shows_only_the_callers_own_tasks_of_that_source(alice, bob, api, jobs):
    page = api(alice).get("/api/web/tasks", {"limit": 2, "offset": 0}).json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert api(alice).get("/api/telegram/tasks").json()["count"] == 0
    assert api(bob).get("/api/web/tasks").json()["count"] == 0


def test_the_list_costs_a_fixed_number_of_queries(alice, api, jobs):
    client = api(alice)
    with CaptureQueriesContext(connection) as few:
        client.get("/api/web/tasks")
    for name in ("a", "b", "c"):
        submit(alice, jobs["session"], name)
    with CaptureQueriesContext(connection) as more:
        client.get("/api/web/tasks")
    assert len(more.captured_queries) == len(few.captured_queries)


def test_refusals_carry_a_stable_code(alice, charlie, api, jobs):
    anonymous = api(None).get("/api/web/tasks")
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "not_authenticated"
    outsider = api(charlie).get("/api/web/tasks")
    assert outsider.status_code == 403 and set(outsider.json()) == {"code", "message", "extra"}
    missing = api(alice).post("/api/web/tasks/999999/cancel")
    assert missing.status_code == 404 and missing.json()["code"] == "task_not_found"
    ended = api(alice).post(f"/api/web/tasks/{jobs['succeeded'].pk}/cancel")
    assert ended.status_code == 409 and ended.json()["code"] == "job_not_active"


def test_the_owner_cancels_a_queued_task(alice, api, jobs):
    response = api(alice).post(f"/api/web/tasks/{jobs['queued'].pk}/cancel")
    assert response.status_code == 202, response.content
    jobs["queued"].refresh_from_db()
    assert jobs["queued"].status == JobStatus.CANCELLED
    assert jobs["queued"].runs.get().status == RunEnding.CANCELLED
