"""Crash injection for async tasks, cron runs and their delivery (issue 27): kill the worker between a
run's ending and its delivery, or while an operator retries a dead letter; a restarted worker's sweep
must deliver every ending exactly once and strand nothing.

Each run gets a fresh database (as :mod:`tests.e2e.crash`) and the product's own paths in worker
processes (:mod:`tests.e2e.crash_jobs_worker`): a setup role, a crashing role with
``SKALD_FAILPOINTS=<point>`` (SIGKILL there), and the restarted worker's sweep, which reports.
``make crash`` runs every case N times (``python -m tests.e2e.crash_jobs --runs N``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e import crash
from tests.e2e.crash import (
    Database,
    _env,
    campaign_parser,
    database,
    database_kinds,
    forked_children,
    run_copy,
    with_worker,
)

BASE_DIR = Path(__file__).resolve().parents[2]
WORKER = "tests.e2e.crash_jobs_worker"
# scenario: (the setup role, the crashing role)
SCENARIOS = {"async": ("spawn-task", "run"), "cron": ("spawn-cron", "run"), "dead-letter": ("deadletter", "retry")}
CASES: tuple[tuple[str, str], ...] = (
    ("async", "jobs.after_run_end"),  # the ending committed; its delivery was never enqueued
    ("async", "delegation.before_delivery"),  # inside the delivery, before it commits
    ("cron", "jobs.after_run_end"),
    ("cron", "delegation.before_delivery"),
    ("dead-letter", "jobs.during_dead_letter_retry"),  # the retry committed; its delivery never enqueued
    ("dead-letter", "delegation.before_delivery"),  # the retried delivery dies before it commits
)
# What ``make test`` runs (each point once): a case is three worker processes, ~3-4 s wall.
SUITE_CASES = (("async", "jobs.after_run_end"), ("cron", "jobs.after_run_end"),
               ("dead-letter", "jobs.during_dead_letter_retry"))


def _child(role: str, workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if crash._forks:
        return crash._forks[-1].run(WORKER, [role, str(workdir)], env=env, timeout=120)
    return subprocess.run([sys.executable, "-m", WORKER, role, str(workdir)], cwd=BASE_DIR, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def crash_once(db: Database, scenario: str, point: str, number: int = 0) -> dict[str, Any]:
    """One run: set up ``scenario``, die at ``point``, sweep as the restarted worker; its report."""
    setup, crashing = SCENARIOS[scenario]
    with run_copy(db, "skald-crash-jobs", number) as (workdir, name):
        queued = _env(workdir, {**db.env_for(name), "SKALD_SYNC_TASKS": "0"})  # no worker takes the queue
        inline = dict(queued, SKALD_SYNC_TASKS="1")  # this process is the worker
        prepared = _child(setup, workdir, queued)
        assert prepared.returncode == 0, prepared.stderr[-3000:]
        worker = _child(crashing, workdir, dict(inline, SKALD_FAILPOINTS=point,
                                               SKALD_FAILPOINTS_ONCE=str(workdir / "fired")))
        recovered = _child("recover", workdir, inline)
        assert recovered.returncode == 0, recovered.stderr[-3000:]
        report: dict[str, Any] = json.loads(recovered.stdout.strip().splitlines()[-1])
    return with_worker(report, worker, point=point, scenario=scenario)


def violations(report: dict[str, Any]) -> list[str]:
    """The invariants: the worker died there, leaving one ended run undelivered; that run ended once
    and was delivered exactly once (one delivery audit row, one delivered ``TaskUpdate``, a task's
    one ``task_completed``); nothing due, dead-lettered or running; every exchange settled; rows
    and the audit chain intact."""
    broken = []
    if not report["died"]:
        broken.append(f"the worker did not die at {report['point']} {report['worker_stderr']}")
    if report["due_at_restart"] != 1:  # the kill came after the ending committed, before its delivery did
        broken.append(f"the restarted worker found {report['due_at_restart']} ending(s) due, not 1")
    runs = report["runs"]
    if len(runs) != 1:
        broken.append(f"expected one run, found {len(runs)}")
    for run in runs:
        once = (run["ended"], run["delivered_audit"], run["delivered_updates"])
        if once != (1, 1, 1) or run["task_completed"] not in (None, 1):
            broken.append(f"run {run['job']}/{run['run']} not ended and delivered exactly once: {run}")
    if report["undelivered"] or report["stranded"]:
        broken.append(f"stranded: {report['undelivered']} due, {report['stranded']} undelivered/running/dead")
    if not report["settled"]:
        broken.append(f"not settled after {report['seconds']} s: {report['exchanges']}")
    if not report["seq_dense"] or report["findings"] or not report["chain_ok"]:
        broken.append(f"lost or broken rows: dense={report['seq_dense']} chain={report['chain_ok']} "
                      f"findings={report['findings']}")
    return broken


def main(argv: list[str] | None = None) -> int:
    args = campaign_parser(__doc__.splitlines()[0]).parse_args(argv)
    failed = False
    for kind, url in database_kinds(args):
        print(f"\n{kind} (jobs): {args.runs} runs per failpoint")
        print(f"{'scenario':12} {'failpoint':32} {'runs':>4} {'died':>4} {'once':>4} {'strand':>6} {'max s':>6}")
        with forked_children(), database(kind, url) as db:
            for scenario, point in CASES:
                rows = [crash_once(db, scenario, point, n) for n in range(args.runs)]
                died = sum(r["died"] for r in rows)
                once = sum(1 for r in rows if len(r["runs"]) == 1 and not any(
                    (x["ended"], x["delivered_audit"], x["delivered_updates"]) != (1, 1, 1)
                    or x["task_completed"] not in (None, 1) for x in r["runs"]))
                stranded = sum(r["stranded"] + r["undelivered"] for r in rows)
                for report in rows:
                    for broken in violations(report):
                        failed = True
                        print(f"  ! {scenario} {point}: {broken}", flush=True)
                print(f"{scenario:12} {point:32} {len(rows):4} {died:4} {once:4} {stranded:6} "
                      f"{max(r['seconds'] for r in rows):6.2f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
