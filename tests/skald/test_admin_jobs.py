"""The jobs admin and a run's frame tree (SPEC S4, O3): operators schedule cron jobs (next run, last
runs, outcome), see async tasks, and read a run's nested frames."""

from __future__ import annotations

import pytest
from django.test import Client
from django_q.models import Schedule

from approvals.rules.seed import demo_rules_ensure
from audit.actors import Actor
from loop.models import Frame
from skald.cases.services import case_create
from skald.jobs.models import JobKind, ScheduledJob
from skald.jobs.selectors import tree_spend
from skald.sessions.services import session_create
from skald.tasks import run_cron_job

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def operator_client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_an_operator_schedules_a_cron_job_and_sees_its_runs(operator_client, agents, script, alice):
    page = operator_client.get("/admin/skald/scheduledjob/add/")
    assert page.status_code == 200 and "log-analyst" in page.content.decode()
    refused = operator_client.post("/admin/skald/scheduledjob/add/", {"agent": "log-analyst", "task": "nightly",
                                                                     "cron": "every night", "source": "web",
                                                                     **inline_management(0)})
    assert refused.status_code == 200 and "is not a cron expression" in refused.content.decode()
    assert not ScheduledJob.objects.exists()
    # Issue 27 §7: a cron job needs a home conversation, or its results would reach nobody.
    homeless = operator_client.post("/admin/skald/scheduledjob/add/", {"agent": "log-analyst", "task": "nightly",
                                                                      "cron": "0 3 * * *", "source": "web",
                                                                      **inline_management(0)})
    assert homeless.status_code == 200 and "needs a home for its results" in homeless.content.decode()
    assert not ScheduledJob.objects.exists()
    home = session_create(user=alice, agent="troubleshooter", title="ops")

    created = operator_client.post("/admin/skald/scheduledjob/add/", {"agent": "log-analyst", "task": "nightly",
                                                                     "cron": "0 3 * * *", "source": "web",
                                                                     "home_session": str(home.pk),
                                                                     **inline_management(0)})
    assert created.status_code == 302, created.content.decode()[-2000:]
    job = ScheduledJob.objects.get()
    assert job.kind == JobKind.CRON and job.owner_id == alice.pk and Schedule.objects.get(pk=job.schedule_id)
    assert job.home_session_id == home.pk

    script(text_turn_for("nothing unusual"))
    assert run_cron_job(job.pk) == "succeeded"
    listing = operator_client.get("/admin/skald/scheduledjob/").content.decode()
    assert "#1 succeeded" in listing and "0 3 * * *" in listing
    detail = operator_client.get(f"/admin/skald/scheduledjob/{job.pk}/change/").content.decode()
    assert "succeeded" in detail and "Next run" in detail
    assert "Returned tokens" in detail  # what a task gave back to its root (none for a cron run)

    edited = operator_client.post(f"/admin/skald/scheduledjob/{job.pk}/change/",
                                  {"task": "nightly, earlier", "cron": "0 2 * * *", **inline_management(1),
                                   "runs-0-id": str(job.runs.get().pk), "runs-0-job": str(job.pk)})
    assert edited.status_code == 302, edited.content.decode()[-2000:]
    job.refresh_from_db()
    assert job.cron == "0 2 * * *" and Schedule.objects.get(pk=job.schedule_id).cron == "0 2 * * *"


def test_an_operator_schedules_a_cron_job_that_notifies_its_owner(operator_client, agents, script, alice,
                                                                 inline_tasks):
    """Issue 27 §7: the form's other home, "notify the owner": each run's result goes to the owner's
    Notices conversation (made on first use); a conversation and the notice together are refused."""
    home = session_create(user=alice, agent="troubleshooter", title="ops")
    form = {"agent": "log-analyst", "task": "nightly", "cron": "0 3 * * *", "source": "web", **inline_management(0)}
    both = operator_client.post("/admin/skald/scheduledjob/add/", {**form, "home_session": str(home.pk),
                                                                  "notify_owner": "on"})
    assert both.status_code == 200 and "not both" in both.content.decode()
    assert "notify the owner" in operator_client.get("/admin/skald/scheduledjob/add/").content.decode()

    created = operator_client.post("/admin/skald/scheduledjob/add/", {**form, "notify_owner": "on"})
    assert created.status_code == 302, created.content.decode()[-2000:]
    job = ScheduledJob.objects.get()
    assert job.notify_owner and job.home_session is not None
    assert (job.home_session.owner_id, job.home_session.source) == (alice.pk, "notices")
    script(text_turn_for("nothing unusual"))
    assert run_cron_job(job.pk) == "succeeded"
    assert job.runs.get().delivered_at is not None


def inline_management(runs: int) -> dict[str, str]:
    return {"runs-TOTAL_FORMS": str(runs), "runs-INITIAL_FORMS": str(runs), "runs-MIN_NUM_FORMS": "0",
            "runs-MAX_NUM_FORMS": "0"}


def text_turn_for(text: str):
    from loop.providers.loopback import text_turn

    return text_turn(text)


def test_a_runs_page_shows_its_frame_tree(operator_client, agents, alice, settings, tmp_path):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "ws"
    demo_rules_ensure()
    from approvals.rules.seed import default_rules_ensure
    from skald.cases.runs import run_launch

    default_rules_ensure()
    demo_rules_ensure()
    case = case_create(actor=Actor.system("test"), title="502s", logs=[("app.log", "FATAL pool exhausted")])
    run, _ = run_launch(user=alice, case_id=case.pk, ticket="502s", launch_key="k")  # the demo playbook
    child = Frame.objects.get(session_id=run.session_id, depth=1)
    page = operator_client.get(f"/admin/skald/run/{run.pk}/change/").content.decode()
    assert "Frame tree" in page and 'class="frame depth-1"' in page
    assert f"<strong>{child.agent}</strong> depth 1" in page and "execute_task" in page and "read_logs" in page
    # Issue 27 §2: the tree's spend (this run's exchanges with their sync children, and its async task).
    spent = tree_spend(session_id=run.session_id)
    assert spent.own > 0 and spent.task_count == 1 and spent.tasks > 0
    assert f"Token spend (tree)</dt><dd class=\"skald-tree-spend\">{spent.total} — this run {spent.own}" in page
    # Issue 35: the tree is part of the live fragment (it follows the timeline's feed); journal rows
    # start hidden behind a toggle; each visible row shows its duration.
    live = operator_client.get(f"/admin/skald/run/{run.pk}/live/").content.decode()
    assert 'id="frame-tree"' in live and 'class="frame depth-1"' in live
    assert 'id="journal-toggle"' in page and 'id="run-live" class="hide-journal"' in page
    assert 'class="duration"' in live and " journal row" in live


def test_session_events_filter_by_kind_in_words(client, agents, alice):
    from django.utils.timezone import now

    from loop.models import SessionEvent
    from tests.conftest import make_user

    session = session_create(user=alice, agent="troubleshooter")
    for seq, kind in enumerate(["user", "compaction", "control:compaction_probe"], start=1):
        SessionEvent.objects.create(session_id=session.pk, seq=seq, kind=kind, payload={},
                                    idempotency_key=f"k{seq}", created_at=now())
    client.force_login(make_user("root", superuser=True))
    url = "/admin/loop/sessionevent/"
    everything = client.get(url, {"session": session.pk})
    assert everything.status_code == 200 and len(everything.context["cl"].result_list) == 3
    assert "compaction probe" in everything.content.decode()  # the filter names kinds in words
    found = client.get(url, {"session": session.pk, "kind": "compaction"}).context["cl"].result_list
    assert [event.seq for event in found] == [2]
