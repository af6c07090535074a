"""Every admin page a demo role can reach answers 200 (issue 35): no link ends in a 403, a 404 or a
500, including the job runs' and scheduled jobs' pages, which link to sessions, tool calls and users
an operator may not open. A 403 inside the admin is in the admin's layout and names the missing role.

The Django test client crawls here (fast, every role); ``tests/browser/test_role_journeys.py``
crawls the real stack in Chromium and measures each page's width."""

from __future__ import annotations

import pytest
from django.test import Client

from approvals.rules.seed import demo_rules_ensure
from skald.core.roles import roles_ensure
from skald.demo import DEMO_USERS, seed_demo
from skald.jobs.classify import Ending
from skald.jobs.cron import cron_job_create
from skald.jobs.models import RunEnding
from skald.jobs.services import job_run_finish, job_run_start, job_submit_task
from skald.models import Case
from skald.sessions.services import session_create
from tests.browser.crawl import MAX_PAGES, crawl

pytestmark = [pytest.mark.django_db(transaction=True)]

ROLES = [*DEMO_USERS, "admin"]


@pytest.fixture
def demo_with_jobs(agents) -> None:
    """The demo, plus what an operator's day adds: a cron job with a run and an async task with a
    failed run, each with its sessions."""
    from django.contrib.auth.models import User

    roles_ensure()  # a transactional test's flush removed the groups the migration created
    seed_demo(password="pw-crawl")
    demo_rules_ensure()
    operator = User.objects.get(username="operator")
    home = session_create(user=operator, agent="troubleshooter", title="ops")
    cron = cron_job_create(owner_id=operator.pk, agent="log-analyst", task="nightly look", expression="0 3 * * *",
                           source="web", home_session_id=home.pk, principal=f"user:{operator.pk}")
    task = job_submit_task(owner_id=operator.pk, source=home.source, parent_session_id=home.pk,
                           parent_exchange_id=None, parent_call_id=None, agent="log-analyst", task="look",
                           tools=["read_logs"], client="", selection={"rule": "auto:strength"}, scope_extras={})
    for job, ending in ((cron, RunEnding.SUCCEEDED), (task, RunEnding.FAILED)):
        run = job_run_start(job_id=job.pk)
        assert run is not None
        job_run_finish(run_id=run.pk, ending=Ending(ending, "done", "it broke" if ending == RunEnding.FAILED else ""))


def signed_in(username: str) -> Client:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


@pytest.mark.parametrize("username", ROLES)
def test_every_admin_page_a_role_reaches_answers_200(demo_with_jobs, username: str) -> None:
    seen, parent = crawl(signed_in(username))  # type: ignore[arg-type]
    broken = {path: (status, parent.get(path)) for path, status in seen.items() if status != 200}
    assert not broken, f"{username}: {broken}"
    assert len(seen) < MAX_PAGES, "the crawl stopped at its bound: some pages were not visited"
    print(f"{username}: {len(seen)} pages")
    if username == "operator":  # the pages that linked to what an operator may not open are crawled
        assert any(path.startswith("/admin/skald/jobrun/") and "/change/" in path for path in seen), sorted(seen)
        assert any(path.startswith("/admin/skald/scheduledjob/") and "/change/" in path for path in seen)


def test_a_403_in_the_admin_is_in_its_layout_and_names_the_missing_role(demo_with_jobs) -> None:
    case = Case.objects.get()
    refused = signed_in("admin").get(f"/admin/skald/case/{case.pk}/launch/")
    text = " ".join(refused.content.decode().split())
    assert refused.status_code == 403
    assert "skald-brand" in text and 'id="permission-denied"' in text  # the admin's layout
    assert "needs the <strong>workflow</strong> role" in text

    session = signed_in("operator").get("/admin/loop/session/")
    text = " ".join(session.content.decode().split())
    assert session.status_code == 403 and 'id="permission-denied"' in text
    assert "Only an administrator" in text

    audit = signed_in("operator").get("/admin/audit/auditevent/")
    assert audit.status_code == 403 and "needs the <strong>auditor</strong> role" in " ".join(
        audit.content.decode().split())


def test_a_403_under_the_api_is_still_json(demo_with_jobs) -> None:
    refused = signed_in("reviewer").post("/workflow/cases/1/gdl", {"ticket": "x"}, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"]
