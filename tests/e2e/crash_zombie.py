"""Zombie workers (issue 28 §2): SIGSTOP a worker running a command past its lease, SIGCONT it later.

Each run: a fresh database (a copy of the migrated template, or a PostgreSQL ``TEMPLATE`` copy) and
two worker processes on two workspace roots (two machines). Worker A drives a message whose model
runs a slow allow-listed command rewriting ``notes.md``; once the command has started, A is
SIGSTOPped. Its lease lapses; worker B recovers the exchange (the command is recorded
``interrupted``), the model writes a newer ``notes.md`` and the exchange settles. Then A is
SIGCONTed: its sync-back must be refused (the fence) and recorded, and the newer file kept.

``make crash`` runs it after the failpoint campaign (``python -m tests.e2e.crash_zombie --runs N``)
and prints, per database: runs, effects per call (always 1), stale writes applied (always 0),
refusals recorded and the newer version kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from skald.core.child_env import hermetic_env
from tests.e2e.crash import Database, campaign_parser, database, database_kinds, pg_admin

BASE_DIR = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 1
GUARD = 90.0  # seconds: a failure guard on each wait, never an assertion about speed


def _env(workdir: Path, db: Database, name: str, machine: str) -> dict[str, str]:
    env = hermetic_env(SKALD_VAR_DIR=str(workdir / "var"), SKALD_DEBUG="0", SKALD_LOG_LEVEL="WARNING",
                       SKALD_LEASE_SECONDS=str(LEASE_SECONDS), PYTHONUNBUFFERED="1",
                       SKALD_WORKSPACE_ROOT=str(workdir / f"root-{machine}"), BRAIN_ENGINE_EXEC_ALLOWLIST="sh",
                       # The command counts its runs in a file outside its workspace (the witness of
                       # "effects per call"), which the sandbox would rightly forbid; confinement has
                       # its own suite (tests/loop/tools/test_sandbox.py).
                       SKALD_EXEC_SANDBOX="off", SKALD_EXEC_UNCONFINED_OK="1")
    env.update(db.env_for(name))
    return env


def _worker(role: str, workdir: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.e2e.zombie_worker", role, str(workdir)], cwd=BASE_DIR,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(probe: Any, what: str) -> None:
    deadline = time.monotonic() + GUARD
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {GUARD} s waiting for {what}")
        time.sleep(0.02)


def zombie_once(db: Database, number: int = 0) -> dict[str, Any]:
    """One run; the report of :mod:`tests.e2e.zombie_worker` plus how each worker ended."""
    with tempfile.TemporaryDirectory(prefix="skald-zombie-") as tmp:
        workdir = Path(tmp)
        if db.kind == "sqlite":
            name = str(workdir / "run.sqlite3")
            shutil.copyfile(db.template, name)
        else:
            name = f"skald_zombie_{os.getpid()}_{number}"
            pg_admin(db.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
                      f'CREATE DATABASE "{name}" TEMPLATE "{db.template}"')
        a = _worker("drive", workdir, _env(workdir, db, name, "a"))
        try:
            _wait(lambda: (workdir / "effects.log").exists() or a.poll() is not None, "worker A's command")
            assert a.poll() is None, f"worker A ended early: {a.communicate()[1][-2000:]}"
            os.kill(a.pid, signal.SIGSTOP)  # stalled mid-command, past its lease
            b = _worker("recover", workdir, _env(workdir, db, name, "b"))
            _, b_err = b.communicate(timeout=GUARD)
            assert b.returncode == 0, f"worker B failed: {b_err[-2000:]}"
            os.kill(a.pid, signal.SIGCONT)
            _, a_err = a.communicate(timeout=GUARD)
            report_proc = _worker("report", workdir, _env(workdir, db, name, "b"))
            out, err = report_proc.communicate(timeout=GUARD)
            assert report_proc.returncode == 0, err[-2000:]
            report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
            report.update(a_exit=a.returncode, a_stderr=a_err[-1500:] if a.returncode not in (0, 3) else "",
                          roots_left=sorted(p.name for p in workdir.glob("root-*/*")))
            return report
        finally:
            if a.poll() is None:
                os.kill(a.pid, signal.SIGCONT)
                a.kill()
                a.wait()
            if db.kind == "postgresql":
                pg_admin(db.server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def violations(report: dict[str, Any]) -> list[str]:
    """What a run must keep, each broken one in words."""
    broken = []
    if report["effects"] != 1:
        broken.append(f"{report['effects']} effects for one call")
    if report["stale_applied"] or not report["newer_kept"]:
        broken.append(f"a stale write landed: notes.md is {report['notes']!r}")
    if not any(r.get("reason") == "lease_lost" and r.get("tool") == "execute_cmd" for r in report["refused"]):
        broken.append(f"no refusal recorded: {report['refused']} (worker A exited {report['a_exit']})")
    if report["interrupted"] != ["interrupted"] or set(report["settled"]) != {"settled"}:
        broken.append(f"not recovered: call {report['interrupted']}, exchanges {report['settled']}")
    if report["findings"] or not report["chain_ok"]:
        broken.append(f"broken rows: chain={report['chain_ok']} findings={report['findings']}")
    if report["roots_left"]:
        broken.append(f"materialised workspaces left on disk: {report['roots_left']}")
    if report["a_stderr"]:
        broken.append(f"worker A failed: {report['a_stderr']}")
    return broken


def main(argv: list[str] | None = None) -> int:
    parser = campaign_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    kinds = database_kinds(args)
    failed = False
    for kind, url in kinds:
        print(f"\n{kind}: zombie workers (SIGSTOP mid-command past a {LEASE_SECONDS} s lease, another worker "
              "on another workspace root takes over and writes a newer version, SIGCONT)")
        print(f"{'runs':>4} {'effects/call':>12} {'stale applied':>13} {'refused':>7} {'newer kept':>10}")
        with database(kind, url) as db:
            rows = [zombie_once(db, n) for n in range(args.runs)]
        for report in rows:
            for broken in violations(report):
                print(f"  ! {broken}", flush=True)
        failed |= any(violations(r) for r in rows)
        per_call = sorted({r["effects"] for r in rows})
        print(f"{len(rows):4} {'/'.join(map(str, per_call)):>12} {sum(r['stale_applied'] for r in rows):13} "
              f"{sum(1 for r in rows if r['refused']):7} {sum(1 for r in rows if r['newer_kept']):10}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
