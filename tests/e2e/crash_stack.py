"""Crash injection through the real stack (SPEC R1-R2 proof): ``python -m skald.launcher`` (daphne +
a django-q2 qcluster + the sweeper) runs with ``SKALD_FAILPOINTS`` naming one point; whichever
process reaches it first — the web process at admission, a qcluster worker driving the turn or
carrying out an approval — dies there by SIGKILL. The stack is then stopped and a clean one started
on the same database: its boot sweep and sweeper recover what was left, and the invariants are
checked (``tests.e2e.crash_worker report``).

The model is a fake OpenAI-compatible server: it asks for one ``execute_cmd`` (an allow-listed
``sh`` appending to an effect log, so every execution is counted) and answers once it sees the
result. The default rules park ``execute_cmd``; the demo approver answers through the API.

``make crash STACK=1`` runs every point N times this way (``python -m tests.e2e.crash_stack``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skald.core.child_env import hermetic_env
from tests.e2e.crash import APPROVAL_POINTS, SETTLE_WITHIN, TURN_POINTS, pg_admin, violations, with_dbname
from tests.e2e.stack import BASE_DIR, Stack, launch, wait_for, wait_ready
from tests.loop.providers.fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Response,
    sse,
    text_chunks,
    tool_call_chunks,
)

LEASE_SECONDS = 1
# A turn parks on the call (execute_cmd needs an approval): its points end at the intent.
FIRST_TURN_POINTS = TURN_POINTS[:TURN_POINTS.index("loop.after_intent") + 1]
CASES: tuple[tuple[str, str], ...] = (tuple(("turn", p) for p in FIRST_TURN_POINTS)
                                      + tuple(("approval", p) for p in APPROVAL_POINTS))
KEY = "e1:t1:c0"  # the one call of the run
MESSAGE_KEY = "crash-message-1"  # the client's idempotency key, reused when a POST is never answered


def policy(effects: Path) -> Any:
    command = f"echo 'effect {KEY}' >> {effects}"

    def answer(request: RecordedRequest) -> Response:
        if request.body["messages"][-1]["role"] == "tool":
            return sse(text_chunks("done"))
        return sse(tool_call_chunks([("call_effect", "execute_cmd", json.dumps({"argv": ["sh", "-c", command]}))]))

    return answer


def halt(stack: Stack) -> None:
    """Stop a stack that may have lost a process: SIGTERM, then SIGKILL whatever of it is left."""
    stack.remember_tree()
    sessions = stack.sessions()
    if stack.process.poll() is None:
        stack.process.send_signal(signal.SIGTERM)
        try:
            stack.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            stack.process.kill()
            stack.process.wait(timeout=10)
    stack.stopped = True
    for proc in stack.leftovers(sessions):
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def running(var_dir: Path, env: dict[str, str]) -> Iterator[Stack]:
    stack = launch(var_dir, env)
    try:
        wait_ready(stack, timeout=60)
        yield stack
    finally:
        halt(stack)


def _exchange_of(stack: Stack, session_id: int) -> dict[str, Any] | None:
    """The session's one exchange, found through its events (a web process killed right after the
    admission never answered the POST)."""
    operator = stack.api("operator")
    ids = [e["exchange"] for e in operator.events(session_id) if e.get("exchange")]
    return operator.exchange(session_id, ids[0]) if ids else None


def _db_env(var_dir: Path, db_env: dict[str, str]) -> dict[str, str]:
    return hermetic_env(**db_env, SKALD_VAR_DIR=str(var_dir))


def _add_runner(var_dir: Path, db_env: dict[str, str]) -> None:
    """An agent whose one tool is ``execute_cmd`` (no demo agent has it), added as an operator would."""
    code = ("from skald.models import Agent; Agent.objects.get_or_create(name='runner', "
            "defaults={'kind': 'chat', 'allowed_tools': ['execute_cmd'], 'system_prompt': 'Run the command.'})")
    done = subprocess.run([sys.executable, str(BASE_DIR / "manage.py"), "shell", "-c", code], cwd=BASE_DIR,
                          env=_db_env(var_dir, db_env), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def _session(stack: Stack, var_dir: Path, db_env: dict[str, str]) -> int:
    _add_runner(var_dir, db_env)
    return int(stack.api("operator").create_session("runner")["id"])


def _fired(workdir: Path, point: str) -> bool:
    return (workdir / "fired" / point).exists()


def crash_once(fake: FakeOpenAIServer, scenario: str, point: str, *, postgres: str = "", number: int = 0
               ) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="skald-crash-stack-") as tmp:
        workdir = Path(tmp)
        (workdir / "fired").mkdir()
        (workdir / "secrets").mkdir()
        effects = workdir / "events.log"
        var_dir = workdir / "var"
        db_env: dict[str, str] = {}
        name = f"skald_crash_stack_{os.getpid()}_{number}"
        if postgres:
            pg_admin(postgres, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
            db_env = {"DATABASE_URL": with_dbname(postgres, name)}
        plain = {**fake.profile_env(workdir / "secrets"), **db_env, "BRAIN_ENGINE_EXEC_ALLOWLIST": "sh",
                 "SKALD_LEASE_SECONDS": str(LEASE_SECONDS), "SKALD_SWEEP_SECONDS": "1"}
        crashing = {**plain, "SKALD_FAILPOINTS": point, "SKALD_FAILPOINTS_ONCE": str(workdir / "fired")}
        fake.default = policy(effects)
        try:
            if scenario == "turn":
                with running(var_dir, crashing) as first:
                    operator = first.api("operator")
                    session_id = _session(first, var_dir, db_env)
                    try:
                        operator.post_message(session_id, "make the effect", key=MESSAGE_KEY)
                    except Exception:
                        pass
                    wait_for(lambda: _fired(workdir, point) or None, timeout=60, what=f"{point} to fire")
            else:
                with running(var_dir, plain) as first:
                    operator = first.api("operator")
                    session_id = _session(first, var_dir, db_env)
                    operator.send(session_id, "make the effect")
                    wait_for(lambda: (row := _exchange_of(first, session_id)) and row["status"] == "parked"
                             and row, timeout=60, what="the park")
                    call_id = next(e["payload"]["tool_call_id"] for e in operator.events(session_id)
                                   if e["kind"] == "control:approval_requested")
                with running(var_dir, crashing) as second:
                    with effects.open("a") as log:
                        log.write(f"approve {KEY}\n")
                    answered = second.api("approver").client.post(f"/api/tools/{call_id}/resolve",
                                                                  json={"decision": "approve", "reason": "ok"})
                    assert answered.status_code == 202, answered.text
                    wait_for(lambda: _fired(workdir, point) or None, timeout=60, what=f"{point} to fire")
            with running(var_dir, plain) as restarted:
                started = time.monotonic()
                if scenario == "turn" and _exchange_of(restarted, session_id) is None:
                    # The web process died inside the admission's transaction: nothing was stored and
                    # the POST was never answered, so the client sends it again under the same key.
                    again = restarted.api("operator").post_message(session_id, "make the effect", key=MESSAGE_KEY)
                    assert again.status_code == 202, again.text

                def settled() -> dict[str, Any] | None:
                    row = _exchange_of(restarted, session_id)
                    return row if row is not None and row["status"] in ("parked", "settled") else None

                try:
                    wait_for(settled, timeout=SETTLE_WITHIN + 20, interval=0.1, what="the recovery")
                except AssertionError:
                    pass  # reported as not settled below
                seconds = round(time.monotonic() - started, 2)
            env = dict(_db_env(var_dir, db_env), CRASH_SECONDS=str(seconds))
            done = subprocess.run([sys.executable, "-m", "tests.e2e.crash_worker", "report", str(workdir)],
                                  cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr[-3000:]
            report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            fake.default = None
            if postgres:
                pg_admin(postgres, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        report.update(point=point, scenario=scenario, died=_fired(workdir, point), worker_stderr="")
        return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make crash STACK=1", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=int(os.environ.get("N", "20")))
    parser.add_argument("--postgres", default=os.environ.get("CRASH_POSTGRES_URL", ""))
    args = parser.parse_args(argv)
    failed = False
    with FakeOpenAIServer(host="127.0.0.1") as fake:
        for kind, url in [("sqlite", "")] + ([("postgresql", args.postgres)] if args.postgres else []):
            print(f"\n{kind} (real stack): {args.runs} runs per failpoint, lease {LEASE_SECONDS} s, "
                  f"settle within {SETTLE_WITHIN} s")
            print(f"{'scenario':10} {'failpoint':30} {'runs':>4} {'settled':>7} {'lost':>4} {'dup':>4} "
                  f"{'unappr':>6} {'max s':>6}")
            for scenario, point in CASES:
                rows = [crash_once(fake, scenario, point, postgres=url, number=n) for n in range(args.runs)]
                for report in rows:
                    for broken in violations(report):
                        print(f"  ! {scenario} {point}: {broken}", flush=True)
                failed |= any(violations(r) for r in rows)
                settled = sum(1 for r in rows if r["settled_or_parked"] and r["seconds"] <= SETTLE_WITHIN)
                lost = sum(1 for r in rows if not r["seq_dense"] or r["findings"] or not r["chain_ok"])
                print(f"{scenario:10} {point:30} {len(rows):4} {settled:7} {lost:4} "
                      f"{sum(r['duplicated'] for r in rows):4} {sum(r['unapproved'] for r in rows):6} "
                      f"{max(r['seconds'] for r in rows):6.2f}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
