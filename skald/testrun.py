"""`make test`: lint contracts, the whole suite on SQLite, then the browser tests beside the
database-sensitive tests on PostgreSQL when DATABASE_URL points to one. With CI=true a missing
PostgreSQL is a failure."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from skald.core.child_env import hermetic_env

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


# pytest-xdist: one worker per core. `loadgroup` hands each worker tests in collection order, which
# pytest-django sorted so that flushing (transactional) tests come after the rest on every worker;
# a module marked xdist_group (the ordered browser journeys on one stack) stays on one worker.
PARALLEL = ["-n", os.environ.get("SKALD_TEST_WORKERS", "auto"), "--dist", "loadgroup"]
_timings: list[tuple[str, float]] = []
_STARTED = time.monotonic()


def _run(title: str, argv: list[str], env: dict[str, str]) -> int:
    print(f"\n=== {title} ===", flush=True)
    started = time.monotonic()
    code = subprocess.run(argv, cwd=BASE_DIR, env=env, check=False).returncode
    _timings.append((title, time.monotonic() - started))
    return code


def _print_timings() -> None:
    print("\nWall time:", flush=True)
    for title, seconds in _timings:
        print(f"  {title:<66} {seconds:7.1f} s", flush=True)
    print(f"  {'total (wall)':<66} {time.monotonic() - _STARTED:7.1f} s", flush=True)


def _postgres_reachable(url: str) -> str:
    try:
        import psycopg

        # The server is what matters: Django's test runner creates its own test database.
        with psycopg.connect(url.replace("postgres://", "postgresql://", 1), dbname="postgres", connect_timeout=5):
            return ""
    except Exception as exc:  # noqa: BLE001 - the message is the diagnosis
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def main() -> int:
    ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    database_url = os.environ.get("DATABASE_URL", "")
    extra_args = sys.argv[1:]
    failures: list[str] = []

    if _run("ruff", [str(BIN / "ruff"), "check", "--quiet", "."], hermetic_env()) != 0:
        failures.append("ruff")
    if _run("import contracts", [str(BIN / "lint-imports"), "--no-cache"], hermetic_env()) != 0:
        failures.append("import contracts")

    if _run("mypy", [str(BIN / "mypy"), "loop", "skald", "approvals", "proposals", "audit"], hermetic_env()) != 0:
        failures.append("mypy")
    if _run("pytest on SQLite", [sys.executable, "-m", "pytest", *PARALLEL, "-m", "not browser", *extra_args],
            hermetic_env()) != 0:
        failures.append("pytest on SQLite")
    # PostgreSQL's pass starts beside the browser phase: the browser tests mostly wait on their
    # stacks and Chromium, so the two overlap on a 2-core machine. Its output is printed after.
    postgres: tuple[subprocess.Popen[bytes], Any, float] | None = None
    if database_url.startswith(("postgres://", "postgresql://")):
        problem = _postgres_reachable(database_url)
        if problem:
            print(f"PostgreSQL at DATABASE_URL is not reachable: {problem}", flush=True)
            failures.append("PostgreSQL unreachable")
        else:
            log = tempfile.TemporaryFile()
            postgres = (subprocess.Popen([sys.executable, "-m", "pytest", *PARALLEL, "-m", "db_sensitive", *extra_args],
                                         cwd=BASE_DIR, env=hermetic_env(DATABASE_URL=database_url), stdout=log,
                                         stderr=subprocess.STDOUT), log, time.monotonic())
    elif ci:
        print("CI=true but DATABASE_URL does not point to PostgreSQL: refusing to skip.", flush=True)
        failures.append("PostgreSQL missing in CI")
    else:
        print("\nDATABASE_URL is not set: the PostgreSQL pass did not run (set it to include it).", flush=True)

    # The browser journeys share one stack per module and run in order: one process, after the rest.
    if _run("browser tests (headless Chromium)", [sys.executable, "-m", "pytest", "-n", "0", "-m", "browser",
                                                  *extra_args], hermetic_env()) != 0:
        failures.append("browser tests")

    if postgres is not None:
        process, log, started = postgres
        code = process.wait()
        _timings.append(("database-sensitive tests on PostgreSQL (beside the browser tests)",
                         time.monotonic() - started))
        print("\n=== database-sensitive tests on PostgreSQL ===", flush=True)
        log.seek(0)
        sys.stdout.buffer.write(log.read())
        sys.stdout.flush()
        log.close()
        if code != 0:
            failures.append("pytest on PostgreSQL")

    _print_timings()
    if failures:
        print("\nFAILED: " + ", ".join(failures), flush=True)
        return 1
    print("\nAll checks passed.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
