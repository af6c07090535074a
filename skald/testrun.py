"""`make test`: lint contracts, the whole suite on SQLite, the browser tests, and the
database-sensitive tests on PostgreSQL when DATABASE_URL points to one. With CI=true a missing
PostgreSQL is a failure. `make quick` (``--quick``): the developer's run, timed the same way.

Every phase starts at once and the phases overlap: the suite waits far more than it computes (real
stacks booting, leases lapsing, Chromium rendering), so on a 2-core machine a phase's waits are the
others' CPU. The SQLite pass prints as it runs; each other phase's output is printed when it ends.
docs/testing.md has the phases, the markers and the measured figures.
"""

from __future__ import annotations

import atexit
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from skald.core.child_env import hermetic_env

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DURATIONS = ["--durations=25"]  # the slowest tests of each pass, to keep docs/testing.md's table honest


def _workers(name: str, default: str) -> list[str]:
    # pytest-xdist. `loadgroup` hands each worker tests in collection order, which pytest-django
    # sorted so that flushing (transactional) tests come after the rest on every worker; a module
    # marked xdist_group (one module-scoped real stack) stays on one worker.
    return ["-n", os.environ.get(name, os.environ.get("SKALD_TEST_WORKERS", default)), "--dist", "loadgroup"]


# Three workers on two cores, as for the SQLite pass: the quick tests wait on their databases and
# threads too (measured on a quiet two-core machine: -n 2 41.5 s, -n 3 37.3-37.9 s, -n 4 41.4 s).
QUICK = ["-q", "-n", os.environ.get("SKALD_QUICK_WORKERS", "3"), "-m", "not e2e and not browser and not slow",
         *DURATIONS]
_timings: list[tuple[str, float, float | None]] = []  # title, wall seconds, CPU seconds
_STARTED = time.monotonic()


@dataclass
class Phase:
    title: str
    process: subprocess.Popen[bytes]
    log: IO[bytes] | None
    started: float
    ended: float = 0.0
    cpu: float = 0.0
    code: int = 0
    reaper: threading.Thread | None = None

    def reap(self) -> None:
        """Wait for the phase's process as soon as it ends: its own wall time, and its tree's CPU
        (``wait4`` reports the process's and every descendant's it waited for)."""
        _, status, usage = os.wait4(self.process.pid, 0)
        self.ended = time.monotonic()
        self.cpu = usage.ru_utime + usage.ru_stime
        self.code = os.waitstatus_to_exitcode(status)
        self.process.returncode = self.code


def _start(title: str, argv: list[str], env: dict[str, str], *, live: bool = False) -> Phase:
    """Start a phase; a ``live`` one prints as it runs, the others into a log printed at the end."""
    if live:
        print(f"\n=== {title} ===", flush=True)
    log = None if live else tempfile.TemporaryFile()
    process = subprocess.Popen(argv, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT if log else None)
    phase = Phase(title, process, log, time.monotonic())
    phase.reaper = threading.Thread(target=phase.reap, daemon=True)
    phase.reaper.start()
    return phase


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _finish(phase: Phase) -> int:
    assert phase.reaper is not None
    phase.reaper.join()
    _timings.append((phase.title, phase.ended - phase.started, phase.cpu))
    if phase.log is not None:
        print(f"\n=== {phase.title} ===", flush=True)
        phase.log.seek(0)
        sys.stdout.buffer.write(phase.log.read())
        sys.stdout.flush()
        phase.log.close()
    return phase.code


def _print_timings() -> None:
    print(f"\n  {'phase (they overlap)':<58} {'wall':>9} {'CPU':>9}", flush=True)
    for title, seconds, cpu in _timings:
        shown = f"{cpu:7.1f} s" if cpu is not None else ""
        print(f"  {title:<58} {seconds:7.1f} s {shown:>9}", flush=True)
    print(f"  {'total':<58} {time.monotonic() - _STARTED:7.1f} s {_cpu():7.1f} s", flush=True)


def _postgres_reachable(url: str) -> str:
    try:
        import psycopg

        # The server is what matters: Django's test runner creates its own test database.
        with psycopg.connect(url.replace("postgres://", "postgresql://", 1), dbname="postgres", connect_timeout=5):
            return ""
    except Exception as exc:  # noqa: BLE001 - the message is the diagnosis
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _byte_compile() -> None:
    """Write the sources' bytecode once. The suite starts some hundreds of Python processes (real
    stacks, crash workers, manage.py); where PYTHONDONTWRITEBYTECODE is set none of them keeps what it
    compiled, so each compiled every Skald module it imported again (~0.1 s CPU per process)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "loop", "skald", "approvals", "proposals",
                    "audit", "tests"], cwd=BASE_DIR, env=hermetic_env(), stdout=subprocess.DEVNULL, check=False)
    _timings.append(("byte-compile the sources", time.monotonic() - started, None))


def _sqlite_template() -> dict[str, str]:
    """Migrate one SQLite file for the whole run (``SKALD_TEST_SQLITE_TEMPLATE``): every xdist worker's
    test database and every real stack starts from a copy instead of running ~60 migrations (5.4 s
    of CPU each, measured here). Removed when the run ends."""
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="skald-test-template-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    done = subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=BASE_DIR,
                          env=hermetic_env(SKALD_VAR_DIR=str(home)), capture_output=True, text=True, check=False)
    _timings.append(("migrate the SQLite template once", time.monotonic() - started, None))
    if done.returncode != 0:  # each worker then migrates its own, and says why
        print(f"Migrating the SQLite template failed; each worker migrates its own:\n{done.stderr[-2000:]}",
              flush=True)
        return {}
    return {"SKALD_TEST_SQLITE_TEMPLATE": str(home / "skald.sqlite3")}


def _postgres_admin(url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1), dbname="postgres", autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def _postgres_template(url: str) -> dict[str, str]:
    """The same for PostgreSQL (``SKALD_TEST_PG_TEMPLATE``): one migrated database on the server, which
    each worker's test database is created from (``CREATE DATABASE … TEMPLATE``); dropped at exit."""
    started = time.monotonic()
    name = f"skald_test_template_{os.getpid()}"
    drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
    _postgres_admin(url, drop, f'CREATE DATABASE "{name}"')
    atexit.register(_postgres_admin, url, drop)
    done = subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=BASE_DIR,
                          env=hermetic_env(DATABASE_URL=f"{url.rpartition('/')[0]}/{name}", SKALD_DB_POOL="0"),
                          capture_output=True, text=True, check=False)
    _timings.append(("migrate the PostgreSQL template once", time.monotonic() - started, None))
    if done.returncode != 0:
        print(f"Migrating the PostgreSQL template failed; each worker migrates its own:\n{done.stderr[-2000:]}",
              flush=True)
        return {}
    return {"SKALD_TEST_PG_TEMPLATE": name}


def _rewrite_cache_fresh() -> bool:
    """Whether every test module and conftest has a rewritten pyc at least as new as its source."""
    import pytest

    tag = f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
    for source in (BASE_DIR / "tests").rglob("*.py"):
        if not source.name.startswith(("test_", "conftest")):
            continue
        cached = source.parent / "__pycache__" / f"{source.stem}.{tag}"
        if not cached.exists() or cached.stat().st_mtime < source.stat().st_mtime:
            return False
    return True


def _warm_rewrite_cache() -> None:
    """Collect the suite once with bytecode writing on, so pytest keeps every test module it rewrote
    for its assertions (``tests/**/__pycache__/*-pytest-*.pyc``). Where PYTHONDONTWRITEBYTECODE is set,
    pytest otherwise rewrites the ~350 test modules again in each xdist worker (seven in ``make
    test``): measured here, a full collection costs 16.7 s of CPU uncached and 6.7 s cached."""
    started = time.monotonic()
    if _rewrite_cache_fresh():
        return
    env = hermetic_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=BASE_DIR,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    _timings.append(("collect once: pytest's rewritten test modules cached", time.monotonic() - started, None))


def quick(extra_args: list[str]) -> int:
    _byte_compile()
    _warm_rewrite_cache()
    template = _sqlite_template()
    phase = _start("make quick: SQLite, no e2e, browser or slow tests", [sys.executable, "-m", "pytest", *QUICK,
                                                                        *extra_args], hermetic_env(**template),
                   live=True)
    code = _finish(phase)
    _print_timings()
    return code


def main() -> int:
    if sys.argv[1:2] == ["--quick"]:
        return quick(sys.argv[2:])
    ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    database_url = os.environ.get("DATABASE_URL", "")
    extra_args = sys.argv[1:]
    failures: list[str] = []
    background: list[Phase] = []
    pytest = [sys.executable, "-m", "pytest", *DURATIONS]
    _byte_compile()
    _warm_rewrite_cache()
    template = _sqlite_template()

    # PostgreSQL's pass first: its crash campaign is the longest chain of waits.
    if database_url.startswith(("postgres://", "postgresql://")):
        problem = _postgres_reachable(database_url)
        if problem:
            print(f"PostgreSQL at DATABASE_URL is not reachable: {problem}", flush=True)
            failures.append("PostgreSQL unreachable")
        else:
            pg_template = _postgres_template(database_url)
            background.append(_start("database-sensitive tests on PostgreSQL",
                                     [*pytest, *_workers("SKALD_PG_WORKERS", "2"), "-m", "db_sensitive",
                                      *extra_args], hermetic_env(DATABASE_URL=database_url, **pg_template)))
    elif ci:
        print("CI=true but DATABASE_URL does not point to PostgreSQL: refusing to skip.", flush=True)
        failures.append("PostgreSQL missing in CI")
    else:
        print("\nDATABASE_URL is not set: the PostgreSQL pass did not run (set it to include it).", flush=True)

    # Each browser module is an xdist_group: its journeys share one stack and run in order on one
    # worker, and two workers take the modules between them.
    background.append(_start("browser tests (headless Chromium)", [*pytest, *_workers("SKALD_BROWSER_WORKERS", "2"),
                                                                   "-m", "browser", *extra_args],
                             hermetic_env(**template)))
    background.append(_start("ruff", [str(BIN / "ruff"), "check", "--quiet", "."], hermetic_env()))
    background.append(_start("import contracts", [str(BIN / "lint-imports"), "--no-cache"], hermetic_env()))
    background.append(_start("mypy", [str(BIN / "mypy"), "loop", "skald", "approvals", "proposals", "audit"],
                             hermetic_env()))

    sqlite = _start("pytest on SQLite", [*pytest, *_workers("SKALD_SQLITE_WORKERS", "3"), "-m", "not browser",
                                         *extra_args], hermetic_env(**template), live=True)
    if _finish(sqlite) != 0:
        failures.append("pytest on SQLite")
    for phase in background:
        if _finish(phase) != 0:
            failures.append(phase.title)

    _print_timings()
    if failures:
        print("\nFAILED: " + ", ".join(failures), flush=True)
        return 1
    print("\nAll checks passed.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
