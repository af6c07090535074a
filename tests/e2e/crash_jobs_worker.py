"""A worker process for the jobs crash points: ``python -m tests.e2e.crash_jobs_worker ROLE DIR``.

The product's own paths (Skald's agents, gate wiring, job services and django-q2 entry points) on
the real store and audit chain, with a scripted model installed in-process
(:func:`skald.loop_adapters.runtime.set_provider_factory`). ``SKALD_SYNC_TASKS`` decides whether a
role's enqueued work runs inline (a worker carrying it out) or waits in the ORM queue, which no
cluster reads here (the worker that would have taken it is the next role). With
``SKALD_FAILPOINTS`` a role dies by SIGKILL at that point; ``recover`` is the restarted worker's
sweep, and reports the invariants as JSON on stdout.

Roles:
    spawn-task  a user's message; the parent's model calls ``execute_task`` (async): the job is
                written and its run queued (run with ``SKALD_SYNC_TASKS=0``: no worker takes it)
    spawn-cron  a cron job homed in the user's conversation
    run         a worker runs the job (``skald.tasks.run_job`` / ``run_cron_job``)
    deadletter  the cron run ends, its home is gone: five sweeps park its delivery as a dead letter;
                then the operator gives the job a home again
    retry       the operator retries the dead letter (``job_run_delivery_retry``)
    recover     the restarted worker: wait for every lease to lapse, sweep until nothing is due, report
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROLES = ("spawn-task", "spawn-cron", "run", "deadletter", "retry", "recover")


def _install() -> None:
    """The scripted model and a gate that allows everything, in this process."""
    from loop.models import Session
    from loop.providers.base import ProviderRequest, ToolResultMessage
    from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
    from skald.loop_adapters.runtime import set_gate_factory, set_provider_factory
    from tests.skald.conftest import AllowAll

    def model(request: ProviderRequest) -> Any:
        source = Session.objects.filter(pk=request.metadata["session"]).values_list("source", flat=True).first()
        if source in ("task", "cron"):
            return text_turn("found it")  # the job's own conversation
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolResultMessage):  # the spawn's result, or a delivered task_completed
            return text_turn("noted")
        return tool_turn(("execute_task", {"agent": "log-analyst", "task": "dig", "mode": "async"}))

    provider = LoopbackProvider([model], repeat_last=True)
    set_provider_factory(lambda agent: provider)
    set_gate_factory(AllowAll)


def _user() -> Any:
    from django.contrib.auth.models import Group, User

    from skald.core.roles import roles_ensure

    user = User.objects.filter(username="alice").first()
    if user is None:
        roles_ensure()
        user = User.objects.create_user(username="alice", password="crash-jobs", is_staff=True)
        user.groups.add(*Group.objects.filter(name__in=("operator", "workflow")))
    return user


def _conversation(user: Any) -> Any:
    from skald.agents.seed import seed_agents
    from skald.sessions.services import session_create

    seed_agents()
    return session_create(user=user, agent="troubleshooter", title="crash jobs")


def _sweep_until_idle(timeout: float) -> float:
    """The restarted worker's sweeps (``sweep`` and ``deliver_due_jobs``) until nothing is due."""
    from django.conf import settings

    from loop.models import Exchange, ExchangeStatus
    from skald import tasks
    from skald.jobs.delivery import deliveries_due

    started = time.monotonic()
    time.sleep(settings.SKALD_LEASE_SECONDS + 0.1)  # a dead worker's claims lapse first
    while time.monotonic() - started < timeout:
        tasks.sweep()
        tasks.deliver_due_jobs()
        if not deliveries_due() and not Exchange.objects.filter(status__in=(ExchangeStatus.OPEN,)).exists():
            break
        time.sleep(0.2)
    return round(time.monotonic() - started, 2)


def _report(workdir: Path, seconds: float) -> dict[str, Any]:
    """The kernel's invariants (``tests.e2e.crash_worker``) plus the jobs': every ended run ended
    once and was delivered exactly once, nothing left due, parked as a dead letter or running."""
    from audit.kinds import AuditKind
    from audit.models import AuditEvent
    from loop.events import EventKind
    from loop.models import SessionEvent, ToolCall
    from skald.jobs.delivery import deliveries_due
    from skald.jobs.models import JobKind, JobRun, RunEnding
    from tests.e2e.crash_worker import _report as kernel_report

    report = kernel_report(workdir, require=False, seconds=seconds)
    runs = []
    for run in JobRun.objects.select_related("job").order_by("pk"):
        job = run.job
        audit = AuditEvent.objects.filter(subject_type="job", subject_id=str(job.pk))
        rows = [(kind, json.loads(payload) if isinstance(payload, str) else payload)
                for kind, payload in audit.values_list("kind", "payload")]
        mine = [(kind, payload) for kind, payload in rows if payload.get("run") == run.number]
        endings = [p for kind, p in mine if kind == AuditKind.JOB_STATE_CHANGED
                   and p.get("to") not in (None, RunEnding.RUNNING)]
        home = job.parent_session_id or job.home_session_id
        updates = [p for p in SessionEvent.objects.filter(session_id=home, kind=EventKind.TASK_UPDATE)
                   .values_list("payload", flat=True) if p.get("job") == job.pk and p.get("run") == run.number
                   and p.get("delivered")]
        runs.append({
            "job": job.pk, "kind": job.kind, "run": run.number, "status": run.status,
            "ended": len(endings),
            "delivered_audit": sum(1 for kind, _ in mine if kind == AuditKind.JOB_DELIVERED),
            "delivered_updates": len(updates),
            "task_completed": (ToolCall.objects.filter(session_id=home, tool="task_completed").count()
                               if job.kind == JobKind.TASK else None),
            "delivered": run.delivered_at is not None, "dead_letter": run.dead_lettered_at is not None,
        })
    report.update(
        runs=runs,
        undelivered=len(deliveries_due()),
        stranded=sum(1 for r in runs if r["status"] == RunEnding.RUNNING or not r["delivered"] or r["dead_letter"]),
        settled=all(e["status"] == "settled" for e in report["exchanges"]),
    )
    return report


def main(argv: list[str]) -> int:
    role, workdir = argv[0], Path(argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    import django

    django.setup()
    _install()
    from skald.jobs.models import JobKind, JobRun, ScheduledJob

    if role == "spawn-task":
        from skald import tasks
        from skald.sessions.services import session_message_submit

        user = _user()
        exchange, _ = session_message_submit(user=user, session=_conversation(user), content="dig in the background",
                                             request_key="crash-jobs-1")
        tasks.run_kernel_turn(exchange.pk)  # the worker that takes the parent's turn
        return 0
    if role in ("spawn-cron", "deadletter"):
        from skald.jobs.cron import cron_job_create

        user = _user()
        home = _conversation(user)
        job = cron_job_create(owner_id=user.pk, agent="log-analyst", task="nightly check", expression="0 3 * * *",
                              home_session_id=home.pk, principal=f"user:{user.pk}")
        if role == "spawn-cron":
            return 0
        from skald import tasks
        from skald.jobs.services import DEAD_LETTER_AFTER

        ScheduledJob.objects.filter(pk=job.pk).update(home_session=None)  # its home was deleted (SET_NULL)
        tasks.run_cron_job(job.pk)  # ends; its delivery waits in the queue, and then for the sweeps
        for _ in range(DEAD_LETTER_AFTER):
            tasks.deliver_due_jobs()
        run = JobRun.objects.get(job=job)
        assert run.dead_lettered_at is not None and run.delivered_at is None, "not dead-lettered"
        ScheduledJob.objects.filter(pk=job.pk).update(home_session=home)  # the operator repairs the home
        return 0
    if role == "run":
        from skald import tasks

        job = ScheduledJob.objects.get()
        (tasks.run_job if job.kind == JobKind.TASK else tasks.run_cron_job)(job.pk)
        return 0
    if role == "retry":
        from skald.jobs.services import job_run_delivery_retry

        run = JobRun.objects.get(dead_lettered_at__isnull=False)
        job_run_delivery_retry(run_id=run.pk, principal=f"user:{_user().pk}")
        return 0
    if role == "recover":
        from skald.jobs.delivery import deliveries_due

        # What the kill left: an ended run, due and undelivered (not delivered by the dead worker).
        left = len(deliveries_due())
        seconds = _sweep_until_idle(float(os.environ.get("CRASH_TIMEOUT", "20")))
        print(json.dumps({**_report(workdir, seconds), "due_at_restart": left}, default=str))
        return 0
    raise SystemExit(f"unknown role {role!r}; one of {ROLES}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
