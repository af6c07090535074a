"""Crash injection (SPEC R1-R2 proof): kill a worker at each failpoint, restart it, check invariants.

Each run gets a fresh database (a copy of a migrated template: a SQLite file, or a PostgreSQL
``CREATE DATABASE … TEMPLATE``). A worker process (``tests.e2e.crash_worker``) drives a turn with
``SKALD_FAILPOINTS`` naming one point and dies there by SIGKILL; a second worker process — the
restart — waits for the lease to lapse, recovers and reports. ``make crash`` runs every point N
times (``python -m tests.e2e.crash --runs 20``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skald.core.child_env import hermetic_env
from tests.e2e.forkserver import ForkServer
from tests.e2e.stack import migrated_sqlite

BASE_DIR = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 1
SETTLE_WITHIN = LEASE_SECONDS + 10
TURN_POINTS = ("loop.after_admission", "loop.after_claim", "loop.before_message_end", "loop.after_message_end",
               "loop.after_intent", "loop.inside_tool", "loop.after_tool_result", "loop.before_settle",
               "loop.after_settle")
APPROVAL_POINTS = ("approvals.after_take", "loop.after_intent", "loop.inside_tool", "loop.after_tool_result",
                   "loop.before_settle", "loop.after_settle")
# A turn that compacts its session's history first (SPEC L14), under tiny thresholds.
COMPACTION_POINTS = ("loop.compaction.before_row", "loop.compaction.after_row")
TINY_COMPACTION = '{"threshold_tokens": 60, "keep_tokens": 30, "summary_max_tokens": 100}'
# Inside the frame tree: the root delegates, the child makes the effect (CRASH_DELEGATE=1).
CHILD_POINTS = ("delegation.after_child_open", "loop.after_tool_result", "delegation.before_child_close",
                "delegation.after_child_close", "loop.after_settle")
# The child's call needs an approval: the whole tree parks; the resolver dies carrying it out.
CHILD_APPROVAL_POINTS = ("approvals.after_take", "loop.after_tool_result", "delegation.after_child_close",
                         "loop.after_settle")
CASES: tuple[tuple[str, str], ...] = (tuple(("turn", p) for p in TURN_POINTS)
                                      + tuple(("approval", p) for p in APPROVAL_POINTS)
                                      + tuple(("compaction", p) for p in COMPACTION_POINTS)
                                      + tuple(("child", p) for p in CHILD_POINTS)
                                      + tuple(("child-appr", p) for p in CHILD_APPROVAL_POINTS))


@dataclass(frozen=True)
class Database:
    """Where the runs' databases come from: ``sqlite`` or a PostgreSQL server URL."""

    kind: str
    template: str  # a migrated SQLite file, or a template database name
    server_url: str = ""

    def env_for(self, name: str) -> dict[str, str]:
        if self.kind == "sqlite":
            return {"SKALD_SQLITE_PATH": name}
        return {"DATABASE_URL": with_dbname(self.server_url, name)}


def with_dbname(url: str, name: str) -> str:
    """``url`` naming database ``name`` on the same server."""
    head, _, _old = url.rpartition("/")
    return f"{head}/{name}"


def _env(workdir: Path, extra: dict[str, str]) -> dict[str, str]:
    env = hermetic_env(SKALD_VAR_DIR=str(workdir / "var"), SKALD_DEBUG="0", SKALD_LOG_LEVEL="WARNING",
                       SKALD_LEASE_SECONDS=str(LEASE_SECONDS), PYTHONUNBUFFERED="1")
    env.update(extra)  # the caller's values win (a run's database, failpoints, compaction)
    return env


_forks: list[ForkServer] = []  # the fork server the children start from, inside forked_children()


@contextmanager
def forked_children() -> Iterator[None]:
    """Start the worker processes from a fork server that imported the heavy libraries once (each
    child still sets its environment and calls ``django.setup()`` itself): about half a CPU second
    less per child, some 64 children per database."""
    with ForkServer() as server:
        _forks.append(server)
        try:
            yield
        finally:
            _forks.remove(server)


def _child(role: str, workdir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if _forks:
        return _forks[-1].run("tests.e2e.crash_worker", [role, str(workdir)], env=env, timeout=120)
    return subprocess.run([sys.executable, "-m", "tests.e2e.crash_worker", role, str(workdir)], cwd=BASE_DIR,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def pg_admin(url: str, *statements: str) -> None:
    """Run ``statements`` in autocommit on the server of ``url`` (its ``postgres`` database)."""
    import psycopg

    with psycopg.connect(with_dbname(url, "postgres").replace("postgres://", "postgresql://", 1),
                         autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


@contextmanager
def database(kind: str, server_url: str = "") -> Iterator[Database]:
    """A migrated template for the runs, removed afterwards (SQLite: the process's one migrated
    file, which the real stacks start from too; PostgreSQL: the test run's template database when
    there is one, which is left as it was)."""
    if kind == "sqlite":
        yield Database("sqlite", str(migrated_sqlite()))
        return
    shared = os.environ.get("SKALD_TEST_PG_TEMPLATE", "")  # the test run's (skald/testrun.py): same server
    if shared:
        yield Database("postgresql", shared, server_url)
        return
    with tempfile.TemporaryDirectory(prefix="skald-crash-tpl-") as tmp:
        workdir = Path(tmp)
        name = f"skald_crash_tpl_{os.getpid()}"
        pg_admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
        try:
            done = _child("migrate", workdir, _env(workdir, {"DATABASE_URL": with_dbname(server_url, name)}))
            assert done.returncode == 0, done.stderr[-3000:]
            yield Database("postgresql", name, server_url)
        finally:
            pg_admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def pass_database() -> Iterator[Database]:
    """:func:`database` for the pytest pass this runs in: the PostgreSQL pass's server
    (``DATABASE_URL``), else SQLite."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with database("postgresql", os.environ["DATABASE_URL"]) as db:
            yield db
    else:
        with database("sqlite") as db:
            yield db


@contextmanager
def run_copy(db: Database, prefix: str, number: int) -> Iterator[tuple[Path, str]]:
    """One run's work directory (with its ``fired`` failpoint marks) and its own copy of the migrated
    template: a file beside it on SQLite, a database made ``TEMPLATE`` the template's on PostgreSQL
    (dropped afterwards). Yields the directory and the copy's name."""
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-") as tmp:
        workdir = Path(tmp)
        (workdir / "fired").mkdir()
        if db.kind == "sqlite":
            name = str(workdir / "run.sqlite3")
            shutil.copyfile(db.template, name)
        else:
            name = f"{prefix.replace('-', '_')}_{os.getpid()}_{number}"
            pg_admin(db.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
                     f'CREATE DATABASE "{name}" TEMPLATE "{db.template}"')
        try:
            yield workdir, name
        finally:
            if db.kind == "postgresql":
                pg_admin(db.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def with_worker(report: dict[str, Any], worker: subprocess.CompletedProcess[str], **facts: str) -> dict[str, Any]:
    """The recovered run's report, with whether the crashing worker died of the kill (and its stderr
    when it ended any other way)."""
    report.update(facts, died=worker.returncode == -signal.SIGKILL,
                  worker_stderr=worker.stderr[-2000:] if worker.returncode not in (0, -signal.SIGKILL) else "")
    return report


def crash_once(db: Database, scenario: str, point: str, number: int = 0) -> dict[str, Any]:
    """One run: crash at ``point`` during ``scenario``, restart, recover; the report's invariants."""
    with run_copy(db, "skald-crash", number) as (workdir, name):
        plain = _env(workdir, {**db.env_for(name), **({"CRASH_DELEGATE": "1"} if scenario.startswith("child")
                                                       else {})})
        if scenario == "compaction":  # a history under the default threshold, then tiny ones
            history = _child("history", workdir, plain)
            assert history.returncode == 0, history.stderr[-3000:]
            plain["SKALD_COMPACTION"] = TINY_COMPACTION
        crashing = dict(plain, SKALD_FAILPOINTS=point, SKALD_FAILPOINTS_ONCE=str(workdir / "fired"))
        if scenario in ("turn", "compaction", "child"):
            worker = _child("turn", workdir, crashing)
        else:
            parked = _child("park", workdir, plain)
            assert parked.returncode == 0, parked.stderr[-3000:]
            worker = _child("approve", workdir, crashing)
        recovered = _child("recover", workdir, plain)
        assert recovered.returncode == 0, recovered.stderr[-3000:]
        report: dict[str, Any] = json.loads(recovered.stdout.strip().splitlines()[-1])
    return with_worker(report, worker, point=point, scenario=scenario)


def violations(report: dict[str, Any]) -> list[str]:
    """The invariants a run must keep; each broken one in words."""
    broken = []
    if not report["died"]:
        broken.append(f"the worker did not die at {report['point']} {report['worker_stderr']}")
    if not report["settled_or_parked"] or report["seconds"] > SETTLE_WITHIN:
        broken.append(f"not settled within {SETTLE_WITHIN} s: {report['exchanges']} after {report['seconds']} s")
    if not report["seq_dense"] or report["findings"] or not report["chain_ok"]:
        broken.append(f"lost or broken rows: dense={report['seq_dense']} chain={report['chain_ok']} "
                      f"findings={report['findings']}")
    if report["duplicated"]:
        broken.append(f"an effect ran twice: {report['effects']}")
    if report["unapproved"]:
        broken.append(f"{report['unapproved']} effect(s) ran without their approval")
    return broken


def campaign_parser(description: str) -> argparse.ArgumentParser:
    """``make crash``'s options every campaign shares: runs, and the databases to run on."""
    parser = argparse.ArgumentParser(prog="make crash", description=description)
    parser.add_argument("--runs", type=int, default=int(os.environ.get("N", "20")))
    parser.add_argument("--postgres", default=os.environ.get("CRASH_POSTGRES_URL", ""),
                        help="a PostgreSQL server URL (postgres://user@host:port/any): also run there")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    return parser


def database_kinds(args: argparse.Namespace) -> list[tuple[str, str]]:
    """``(kind, server URL)`` for each database the campaign runs on, SQLite first."""
    return ([] if args.no_sqlite else [("sqlite", "")]) + ([("postgresql", args.postgres)] if args.postgres else [])


def main(argv: list[str] | None = None) -> int:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("CRASH_JOBS", "1")),
                        help="runs of one failpoint at a time (each has its own database and processes)")
    args = parser.parse_args(argv)
    kinds = database_kinds(args)
    failed = False
    for kind, url in kinds:
        print(f"\n{kind}: {args.runs} runs per failpoint, lease {LEASE_SECONDS} s, settle within {SETTLE_WITHIN} s")
        print(f"{'scenario':10} {'failpoint':30} {'runs':>4} {'settled':>7} {'lost':>4} {'dup':>4} {'unappr':>6} "
              f"{'max s':>6}")
        # One child at a time through the fork server; concurrent runs (--jobs) start their own.
        with forked_children() if args.jobs <= 1 else nullcontext(), database(kind, url) as db:
            for scenario, point in CASES:
                with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
                    rows = list(pool.map(lambda n, s=scenario, p=point: crash_once(db, s, p, n), range(args.runs)))
                settled = sum(1 for r in rows if r["settled_or_parked"] and r["seconds"] <= SETTLE_WITHIN)
                lost = sum(1 for r in rows if not r["seq_dense"] or r["findings"] or not r["chain_ok"])
                dup = sum(r["duplicated"] for r in rows)
                unapproved = sum(r["unapproved"] for r in rows)
                slowest = max(r["seconds"] for r in rows)
                failed |= any(violations(r) for r in rows)
                for report in rows:
                    for broken in violations(report):
                        print(f"  ! {scenario} {point}: {broken}", flush=True)
                print(f"{scenario:10} {point:30} {len(rows):4} {settled:7} {lost:4} {dup:4} {unapproved:6} "
                      f"{slowest:6.2f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
