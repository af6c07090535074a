"""Issue 28's reproductions through the real stack, on both databases: one stack for the module.

``python -m skald.launcher`` (daphne, the qcluster with its two workers, the sweeper) on SQLite in
the SQLite pass and on a PostgreSQL database of its own in the PostgreSQL pass (``db_sensitive``),
with a fake OpenAI-compatible model, ``execute_cmd`` allowed (``sh``) and confined by bubblewrap.
One test per reproduction:

1. killing each idle worker in turn: work resumes (the ORM broker; Redis in
   ``test_stack_idle_worker_kill``);
2. a zombie worker: the stack's qcluster is SIGSTOPped while its approved command runs, a second
   qcluster on another workspace root (another machine) takes over and writes a newer version, the
   first is SIGCONTed: its stale write is refused and recorded, never applied;
3. a command that tries to read another session, ``var/``, the database, the secret key,
   ``/proc/1/environ`` and the network: every attempt fails;
4. a chain head whose signature was blanked, in the database or in the file, fails ``verify_chain``;
5. a database that cannot be reached answers 503 ``database_unavailable`` on every route: here SQLite's
   file that cannot be opened; PostgreSQL's terminated backends and refused connections are
   ``test_stack_database_unavailable``'s (skipped here on PostgreSQL);
6. a credential hidden by JSON escapes in tool arguments never reaches a later request;
7. websocket refusals arrive as their close codes, and a socket resolves only its own session's calls.

The stack boots once (about 10 s of CPU): the module stays on one xdist worker. Nothing asserts an
elapsed time; every wait is for rows, events, processes or counters, with a guard against a hang.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from skald.core.child_env import hermetic_env
from tests.e2e.crash_idle import campaign, describe
from tests.e2e.stack import BASE_DIR, PASSWORD, Api, Launch, Stack, descendants, wait_for, wait_ready
from tests.loop.providers.fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    SSEResponse,
    sse,
    text_chunks,
    tool_call_chunks,
)
from tests.netprobe import anyone_connected, loopback_listener

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.db_sensitive,
              pytest.mark.xdist_group("stack_containment")]

GUARD = 90.0  # a hang guard on every wait, never an assertion about speed
CANARY = "skald-contain-canary-5e81"  # in the stack's environment: a command must never read it
LEASE_SECONDS = 3  # the zombie's lease lapses while it is stopped
STALE = "stale from the zombie"
NEWER = "newer from the machine that took over"


def require_bubblewrap() -> None:
    if shutil.which("bwrap") is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("bubblewrap is not installed, and CI must run the confinement tests (.ci/run installs it)")
        pytest.skip("bubblewrap (bwrap) is not installed here: apt-get install bubblewrap")


# --- the module's stack ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(host="127.0.0.1") as fake:
        yield fake


@pytest.fixture(scope="module")
def stack_env(fake_provider: FakeOpenAIServer, postgres: str,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = {**fake_provider.profile_env(tmp_path_factory.mktemp("secrets")),
           "BRAIN_ENGINE_EXEC_ALLOWLIST": "sh", "SKALD_CONTAIN_CANARY": CANARY,
           "SKALD_LEASE_SECONDS": str(LEASE_SECONDS), "SKALD_SWEEP_SECONDS": "1",
           # The wedge backstop stays well clear of a qcluster restart on a loaded machine.
           "SKALD_WORKERS_STALL_SECONDS": "30"}
    if postgres:
        env["DATABASE_URL"] = postgres
    return env


@pytest.fixture(scope="module")
def stack(stack_env: dict[str, str], launch_stack: Launch) -> Stack:
    # stack_env (and the PostgreSQL database) first: fixtures end in reverse, so the stack stops
    # (and records its last head) before its database is dropped.
    stack = launch_stack(stack_env)
    wait_ready(stack, timeout=GUARD)
    # The troubleshooter may run commands: an admin adds execute_cmd to its tools (issue 32's API).
    with stack.http(stack.token("admin")) as admin:
        listed = admin.get("/api/policy/agents/").json()
        row = next(a for a in (listed["results"] if isinstance(listed, dict) else listed)
                   if a["name"] == "troubleshooter")
        patched = admin.patch(f"/api/policy/agents/{row['id']}/", json={"tools": [*row["tools"], "execute_cmd"]},
                              headers={"If-Match": row["etag"]})
        assert patched.status_code == 200, patched.text
    return stack


@pytest.fixture
def server(fake_provider: FakeOpenAIServer) -> Iterator[FakeOpenAIServer]:
    with fake_provider._lock:
        fake_provider.script.clear()
        fake_provider.requests.clear()
    fake_provider.default = None
    yield fake_provider
    fake_provider.default = None


def tool_turn(name: str, arguments: dict[str, Any]) -> SSEResponse:
    return sse(tool_call_chunks([(f"call_{name}", name, json.dumps(arguments))]))


def tool_results(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def pending(approver: httpx.Client, session_id: int) -> list[dict[str, Any]]:
    response = approver.get("/api/approvals/", params={"session": session_id, "status": "pending"})
    assert response.status_code == 200, response.text
    body = response.json()
    return list(body["results"] if isinstance(body, dict) else body)


def parked_call(approver: httpx.Client, session_id: int) -> dict[str, Any]:
    """The session's first pending approval, once it has one."""
    return wait_for(lambda: next(iter(pending(approver, session_id)), None), timeout=GUARD, interval=0.2,
                    what=f"a call of session {session_id} to park")


def approve(approver: httpx.Client, call: dict[str, Any]) -> None:
    answered = approver.post(f"/api/approvals/{call['request_id']}/resolve",
                             json={"decision": "approve", "reason": "contained"})
    assert answered.status_code in (200, 202), answered.text


def drive(operator: Api, approver: httpx.Client, session_id: int, exchange_id: int,
          seen: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Wait for the exchange to settle, approving each call it parks on (recorded in ``seen``)."""
    def probe() -> dict[str, Any] | None:
        row = operator.exchange(session_id, exchange_id)
        if row["status"] in {"settled", "broken"}:
            return row
        for call in pending(approver, session_id):
            if seen is not None:
                seen.append(call)
            approve(approver, call)
        return None

    return wait_for(probe, timeout=GUARD, interval=0.4, what=f"exchange {exchange_id} to settle")


def events_of(operator: Api, session_id: int, exchange_id: int, kind: str) -> list[dict[str, Any]]:
    return [e for e in operator.events(session_id) if e["exchange"] == exchange_id and e["kind"] == kind]


def manage(stack: Stack, postgres: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = hermetic_env(SKALD_VAR_DIR=str(stack.var_dir), **extra, **({"DATABASE_URL": postgres} if postgres else {}))
    return subprocess.run([sys.executable, str(BASE_DIR / "manage.py"), *args], cwd=BASE_DIR, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


# --- 3. a command sees only its own workspace -------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with loopback_listener() as server:
        yield server


def test_a_command_cannot_read_another_session_var_the_database_the_key_the_environment_or_the_network(
        stack: Stack, server: FakeOpenAIServer, operator: Api, approver: httpx.Client, postgres: str,
        listener: socket.socket) -> None:
    require_bubblewrap()
    var = stack.var_dir.resolve()
    root = var / "workspaces"
    key = (var / "secret_key").read_text().strip()
    neighbour = stack.api("approver").create_session()["id"]  # another user's session
    # Its files as they lie on a worker's disk while its own command runs.
    (root / f"session-{neighbour}").mkdir(parents=True, exist_ok=True)
    (root / f"session-{neighbour}" / "secret-plan.txt").write_text(f"{CANARY}-plan\n")
    worker_pids = [p.pid for p in descendants(stack.process.pid)]
    attempts = {
        "neighbour, relative": f"cat ../session-{neighbour}/secret-plan.txt",
        "neighbour, absolute": f"cat {root}/session-{neighbour}/secret-plan.txt",
        "var": f"ls -A {var}",
        "secret key": f"cat {var}/secret_key",
        "database file": f"cat {var}/skald.sqlite3",
        "database server": "bash -c 'exec 3<>/dev/tcp/127.0.0.1/5432'",
        "/proc/1/environ": "cat /proc/1/environ",
        "the server's environ": " && ".join(f"cat /proc/{pid}/environ" for pid in worker_pids),
        "the listener": f"bash -c 'echo hello > /dev/tcp/127.0.0.1/{listener.getsockname()[1]}'",
        "the Skald API": f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{stack.port}'",
    }
    script = "; ".join(f"{command} 2>&1; echo \"== {label}: exit $?\"" for label, command in attempts.items())
    server.push(tool_turn("execute_cmd", {"argv": ["sh", "-c", script]}), sse(text_chunks("Done.")))
    session = operator.create_session()
    posted = operator.send(session["id"], "Look around.")
    seen: list[dict[str, Any]] = []
    settled = drive(operator, approver, session["id"], posted["id"], seen)
    assert seen and seen[0]["preview"].startswith("Sandbox: bubblewrap"), seen  # the approver was told
    results = events_of(operator, session["id"], posted["id"], "tool_result")
    assert len(results) == 1, settled  # unconfined, the key in the output trips the tripwires: no result
    output = results[0]["payload"]["content"]
    exits = {line.split(": exit ")[0][3:]: int(line.rsplit(" ", 1)[1])
             for line in output.splitlines() if line.startswith("== ")}
    assert set(exits) == set(attempts), output
    assert {label: code for label, code in exits.items() if code == 0} == {}, output
    for secret in (CANARY, key, "SQLite format", "SKALD_"):  # contents, never shown
        assert secret not in output, (secret, output)
    listed = set(output.split())
    assert not {"secret_key", "skald.sqlite3", "audit_key", "workspaces"} & listed, output  # var/ is not there
    assert not anyone_connected(listener)
    assert settled["outcome"] == "completed", settled  # (a leaked key would trip the credential tripwires)


# --- 6. tripwires read what the provider reads -----------------------------------------------------------


def test_a_credential_hidden_by_json_escapes_in_tool_arguments_never_reaches_a_later_request(
        stack: Stack, operator: Api, server: FakeOpenAIServer) -> None:
    from tests.loop.tripwire_corpus import fakes

    secret = next(f.snippet for f in fakes() if f.kind == "gitlab-pat")
    escaped = "".join(f"\\u{ord(char):04x}" for char in secret)  # the JSON text never shows the token
    arguments = '{"path": "' + escaped + '.txt"}'
    assert secret not in arguments and json.loads(arguments)["path"] == f"{secret}.txt"
    session = operator.create_session("troubleshooter")
    server.push(sse(tool_call_chunks([("call_read", "read_file", arguments)])), sse(text_chunks("Done.")))
    posted = operator.send(session["id"], "Read the notes.", key="e2e-escaped-credential")
    assert operator.wait_settled(session["id"], posted["id"], timeout=GUARD)["outcome"] == "completed"
    second = server.requests[1].body
    assert secret not in json.dumps(second, ensure_ascii=False)
    call = next(m for m in second["messages"] if m["role"] == "assistant")["tool_calls"][0]
    assert "tool arguments withheld: it matched credential tripwires (gitlab-pat)" in call["function"]["arguments"]


# --- 7. websockets close with their codes and act only on their own session --------------------------------


async def _closed_with(stack: Stack, url: str) -> int | None:
    async with connect(url, origin=Origin(stack.base_url)) as ws:  # the handshake succeeds
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 30.0)  # a hang guard, not a time assertion
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None


def test_websocket_refusals_arrive_as_their_documented_close_codes(stack: Stack, operator: Api,
                                                                   postgres: str) -> None:
    """Accepted, then closed with the code that tells the cases apart; never an HTTP 403 handshake."""
    made = manage(stack, postgres, "shell", "-c", "from django.contrib.auth import get_user_model; "
                  f"get_user_model().objects.create_user('norole', password='{PASSWORD}')")
    assert made.returncode == 0, made.stderr
    session = operator.create_session()["id"]
    others = stack.api("approver").create_session()["id"]
    ws = f"{stack.ws_url}/ws/sessions"
    cases = {
        "no credential": (f"{ws}/{session}/?after=0", 4401),
        "a bad token": (f"{ws}/{session}/?after=0&token=not-a-jwt", 4401),
        "a malformed cursor": (f"{ws}/{session}/?after=x&token={stack.token('operator')}", 4400),
        "no role": (f"{ws}/{session}/?after=0&token={stack.token('norole')}", 4403),
        "someone else's session": (f"{ws}/{others}/?after=0&token={stack.token('reviewer')}", 4404),
        "no such session": (f"{ws}/{10**9}/?after=0&token={stack.token('operator')}", 4404),
    }
    got = {label: asyncio.run(_closed_with(stack, url)) for label, (url, _) in cases.items()}
    assert got == {label: code for label, (_, code) in cases.items()}


def test_a_socket_resolves_only_its_own_sessions_calls(stack: Stack, operator: Api, server: FakeOpenAIServer,
                                                       approver: httpx.Client) -> None:
    """An approval.resolve on session A's socket for session B's parked call is refused and B's call
    stays pending; on B's own socket the same frame is accepted."""
    server.push(tool_turn("execute_cmd", {"argv": ["sh", "-c", "echo resolved"]}), sse(text_chunks("Done.")))
    parked = operator.create_session()
    posted = operator.send(parked["id"], "Run it once approved.")
    call = parked_call(approver, parked["id"])
    own = stack.api("approver").create_session()
    token = stack.token("approver")

    async def resolve_on(session_id: int) -> dict[str, Any]:
        url = f"{stack.ws_url}/ws/sessions/{session_id}/?after=0&token={token}"
        async with connect(url, origin=Origin(stack.base_url)) as ws:
            await ws.send(json.dumps({"type": "approval.resolve", "request_id": call["request_id"],
                                      "decision": "approve", "reason": "over the socket"}))
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 30.0))  # a hang guard
                if frame.get("type") in ("error", "approval.accepted"):
                    return dict(frame)

    answer = asyncio.run(resolve_on(own["id"]))
    assert (answer["type"], answer["code"]) == ("error", "approval_not_found")
    assert pending(approver, parked["id"]) == [call]  # untouched
    assert asyncio.run(resolve_on(parked["id"]))["type"] == "approval.accepted"
    assert operator.wait_settled(parked["id"], posted["id"], timeout=GUARD)["outcome"] == "completed"


# --- 4. heads need signatures -----------------------------------------------------------------------------


def test_a_blanked_head_signature_in_the_database_or_the_file_fails_verify_chain(
        stack: Stack, postgres: str, tmp_path: Path) -> None:
    """With the key the stack generated, the head it recorded at start verifies; blanked in its
    database or in an exported file, it fails, naming the head."""
    exported = json.loads((stack.var_dir / "chain_head.json").read_text())
    assert exported["signature"], exported
    head_file = {"SKALD_CHAIN_HEAD_FILE": str(stack.var_dir / "chain_head.json")}
    nulled = tmp_path / "head.json"
    nulled.write_text(json.dumps({**exported, "signature": None}))
    done = manage(stack, postgres, "verify_chain", "--head", str(nulled), **head_file)
    assert done.returncode == 1 and f"exported head #{exported['seq']} is unsigned" in done.stderr, done

    blank = "UPDATE audit_chainhead SET signature = '' WHERE seq = {}"
    restore = "UPDATE audit_chainhead SET signature = {} WHERE seq = {}"
    if postgres:
        with psycopg.connect(postgres.replace("postgres://", "postgresql://", 1), autocommit=True) as db:
            db.execute(blank.format("%s"), [exported["seq"]])  # type: ignore[arg-type]
    else:
        with sqlite3.connect(stack.var_dir / "skald.sqlite3") as db:
            db.execute(blank.format("?"), [exported["seq"]])
    try:
        done = manage(stack, postgres, "verify_chain", **head_file)
        assert done.returncode == 1 and f"recorded head #{exported['seq']} is unsigned" in done.stderr, done
    finally:  # the launcher records and exports one more head at its stop
        if postgres:
            with psycopg.connect(postgres.replace("postgres://", "postgresql://", 1), autocommit=True) as db:
                db.execute(restore.format("%s", "%s"), [exported["signature"], exported["seq"]])  # type: ignore[arg-type]
        else:
            with sqlite3.connect(stack.var_dir / "skald.sqlite3") as db:
                db.execute(restore.format("?", "?"), [exported["signature"], exported["seq"]])


# --- 2. a zombie worker's write is refused --------------------------------------------------------------


def _cluster_leader(stack: Stack) -> int:
    leaders = [p.pid for p in descendants(stack.process.pid)
               if p.ppid == stack.process.pid and "skald_qcluster" in p.cmdline]
    assert len(leaders) == 1, leaders
    return leaders[0]


def zombie_policy(marker: str) -> Callable[[RecordedRequest], SSEResponse]:
    """The command rewrites notes.md, then sleeps (``marker`` names its sleep); after its
    (interrupted) result, the model writes a newer notes.md; then it reads it; then it answers."""
    def answer(request: RecordedRequest) -> SSEResponse:
        results = tool_results(request)
        if not results:
            return tool_turn("execute_cmd", {"argv": ["sh", "-c", f"printf '{STALE}' > notes.md; sleep {marker}"]})
        if len(results) == 1:
            return tool_turn("write_file", {"path": "notes.md", "content": NEWER})
        if len(results) == 2:
            return tool_turn("read_file", {"path": "notes.md"})
        return sse(text_chunks("Done."))
    return answer


def test_a_zombie_workers_stale_workspace_write_is_refused_and_the_newer_version_kept(
        stack: Stack, stack_env: dict[str, str], operator: Api, approver: httpx.Client, server: FakeOpenAIServer,
        tmp_path: Path) -> None:
    marker = "2.7181"
    server.default = zombie_policy(marker)
    session = operator.create_session()["id"]
    posted = operator.send(session, "Rewrite the notes.")
    approve(approver, parked_call(approver, session))
    leader = _cluster_leader(stack)
    wait_for(lambda: any(f"sleep {marker}" in p.cmdline for p in descendants(leader)), timeout=GUARD,
             what="the approved command to run on the stack's worker")
    # Machine A stalls mid-command (its whole qcluster; the sandboxed command runs on and ends).
    os.killpg(leader, signal.SIGSTOP)
    root_b = tmp_path / "root-b"
    env_b = hermetic_env(**stack_env, SKALD_VAR_DIR=str(stack.var_dir), SKALD_WORKSPACE_ROOT=str(root_b),
                         PYTHONUNBUFFERED="1")
    log_b = tmp_path / "machine-b.log"
    with log_b.open("wb") as log:
        machine_b = subprocess.Popen([sys.executable, str(BASE_DIR / "manage.py"), "skald_qcluster"], cwd=BASE_DIR,
                                     env=env_b, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Machine B recovers the exchange once A's lease lapsed: the command is recorded interrupted,
        # the model writes the newer notes.md (approved), reads it back and answers.
        try:
            settled = drive(operator, approver, session, posted["id"])
        finally:
            os.killpg(leader, signal.SIGCONT)
        assert settled["outcome"] == "completed", settled
        requests = [r for r in server.requests if r.body["messages"][1]["content"] == "Rewrite the notes."]
        interrupted, _written, read_back = tool_results(requests[-1])
        assert "interrupted" in interrupted.lower(), interrupted
        assert NEWER in read_back and STALE not in read_back, read_back
        # A, resumed, finishes its command and syncs back: refused, recorded on the run, never applied.
        # (The refusal belongs to no exchange: another driver owns the exchange's rows now.)
        refusals = wait_for(lambda: [e for e in operator.events(session) if e["kind"] == "control:effect_refused"],
                            timeout=GUARD, what="the zombie's refused write")
        assert [(r["payload"]["tool"], r["payload"]["reason"], r["payload"]["targets"]) for r in refusals] == [
            ("execute_cmd", "lease_lost", ["notes.md"])]
        intents = events_of(operator, session, posted["id"], "control:tool_intent")
        assert sum(1 for e in intents if e["payload"]["name"] == "execute_cmd") == 1  # run once, never again
    finally:
        machine_b.send_signal(signal.SIGTERM)
        try:
            machine_b.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(machine_b.pid, signal.SIGKILL)
            machine_b.wait()
    # The newer version is what the session holds now, read through a later exchange.
    server.default = None
    server.push(tool_turn("read_file", {"path": "notes.md"}), sse(text_chunks("Still newer.")))
    again = operator.send(session, "Read the notes again.")
    drive(operator, approver, session, again["id"])
    assert NEWER in tool_results(server.requests[-1])[-1]
    # Every materialised workspace was removed when its command ended, on both machines.
    assert not list(root_b.glob("session-*")) and not (stack.var_dir / "workspaces" / f"session-{session}").exists()


# --- 1. an idle worker's death freezes nothing (last: the qcluster is replaced) ----------------------------


def test_killing_each_idle_worker_in_turn_resumes_work_within_the_bound(
        stack: Stack, server: FakeOpenAIServer, postgres: str, capsys: pytest.CaptureFixture[str]) -> None:
    server.default = lambda request: sse(text_chunks("Looking."))
    log_before = len(stack.log())
    resumed = campaign(stack)
    broker = "orm-pg" if postgres else "orm"
    with capsys.disabled():
        print()
        for resume in resumed:
            print(describe(broker, resume))
    assert all(r.exchange["status"] == "settled" for r in resumed), [r.exchange for r in resumed]
    assert [r.wedged_after for r in resumed] == [None, None], [describe(broker, r) for r in resumed]
    assert [r.wedge_restarts for r in resumed] == [0, 0], stack.log()[log_before:][-3000:]
    holder, waiter = resumed
    assert holder.restarted and holder.fast_restarts == 1, describe(broker, holder)
    if waiter.told_apart:
        assert not waiter.restarted and waiter.fast_restarts == 0, describe(broker, waiter)


# --- 5. a database that cannot be reached answers 503 (last: the stack's database is taken away) -----------


def test_a_sqlite_file_that_cannot_be_opened_answers_503_database_unavailable_on_every_route(
        stack: Stack, postgres: str) -> None:
    """SQLite's "refused connection": each request opens the file anew, and the file is not there
    (a directory in its place, which even root cannot open as a database). Every route answers 503
    ``database_unavailable`` with ``Retry-After``, authentication included; then the API is back."""
    if postgres:
        pytest.skip("PostgreSQL: tests/e2e/test_stack_database_unavailable.py terminates the server's "
                    "backends and makes it refuse connections")
    token = stack.token("operator")
    database, aside = stack.var_dir / "skald.sqlite3", stack.var_dir / "skald.sqlite3.aside"
    routes = [
        ("GET", "/api/sessions/", {"Authorization": f"Bearer {token}"}, None),  # authentication first
        ("POST", "/api/auth/token/", {}, {"username": "operator", "password": PASSWORD}),
        ("GET", "/api/approvals/", {"Authorization": f"Bearer {token}"}, None),
    ]
    with stack.http() as client:
        assert client.get("/api/sessions/", headers=routes[0][2]).status_code == 200
        database.rename(aside)  # processes holding a connection keep the file; new connections cannot open it
        database.mkdir()
        try:
            answers = [(path, client.request(method, path, headers=headers, json=body))
                       for method, path, headers, body in routes]
        finally:
            database.rmdir()
            aside.rename(database)
        for path, response in answers:
            assert response.status_code == 503, (path, response.status_code, response.text)
            assert response.json()["code"] == "database_unavailable", (path, response.text)
            assert response.headers.get("Retry-After"), path
        assert client.get("/api/sessions/", headers=routes[0][2]).status_code == 200
