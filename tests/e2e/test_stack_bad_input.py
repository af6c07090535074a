"""Bad input against the real daphne stack (`make run`'s defaults, DEBUG on): every refusal is a
JSON 4xx, including the ones the HTTP server gives before Django sees the request; and the
launcher records and exports a signed audit chain head when it stops (issue 11)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from skald.core.child_env import hermetic_env
from tests.e2e import attack
from tests.e2e.stack import BASE_DIR, Launch, Stack

# One worker runs the whole module: its module-scoped stack boots once, not once per xdist worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("stack_bad_input")]


@pytest.fixture(scope="module")
def stack(launch_stack: Launch) -> Stack:
    return launch_stack()


def raw_request(stack: Stack, head: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are (no client-side URL checks) and read the whole answer (HTTP/1.0:
    no chunked framing to undo)."""
    with socket.create_connection(("127.0.0.1", stack.port), timeout=10) as sock:
        sock.sendall(head + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    assert raw, "the server closed the connection without an answer"
    status_line, _, rest = raw.partition(b"\r\n")
    header_block, _, payload = rest.partition(b"\r\n\r\n")
    headers = {}
    for line in header_block.split(b"\r\n"):
        name, _, value = line.partition(b":")
        headers[name.decode().strip().lower()] = value.decode().strip()
    return int(status_line.split()[1]), headers, payload


def get(stack: Stack, target: str, extra_headers: str = "") -> tuple[int, dict[str, Any]]:
    head = (f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n{extra_headers}Connection: close\r\n\r\n").encode()
    status, headers, payload = raw_request(stack, head)
    assert "application/json" in headers.get("content-type", ""), (status, headers, payload[:300])
    return status, json.loads(payload)


@pytest.mark.parametrize("size", [13_000, 30_000, 100_000])
def test_it_answers_an_oversize_query_string_414_in_json(stack, size):
    # 13 KB reaches Django's request guard; 30 KB and 100 KB pass twisted's 16 KiB line limit,
    # where the launcher's guarded channel answers instead of dropping the connection.
    status, body = get(stack, "/api/sessions/?q=" + "a" * size)
    assert (status, body["code"]) == (414, "uri_too_long")
    assert set(body) == {"code", "message", "extra"}


def test_it_answers_an_oversize_header_431_in_json(stack):
    status, body = get(stack, "/api/sessions/", extra_headers=f"X-Big: {'b' * 20_000}\r\n")
    assert (status, body["code"]) == (431, "headers_too_large")


@pytest.mark.parametrize("path", ["/api/nope", "/api/sessions/x/", "/workflow/nope", "/workflow/cases/1/gd"])
def test_it_answers_unknown_api_paths_404_in_json_with_debug_on(stack, path):
    status, body = get(stack, path)
    assert (status, body["code"]) == (404, "not_found")
    assert "urlpatterns" not in json.dumps(body).lower()


def test_it_answers_a_nul_in_the_path_400(stack):
    status, body = get(stack, "/api/approvals/batches/1/a%00b/resolve")
    assert (status, body["code"]) == (400, "nul_character")


def test_it_answers_a_body_over_the_limit_413_even_unauthenticated(stack):
    body = json.dumps({"username": "x" * 3_000_000, "password": "y"}).encode()
    head = (f"POST /api/auth/token/ HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    status, _headers, payload = raw_request(stack, head, body)
    assert (status, json.loads(payload)["code"]) == (413, "request_too_large")


def test_the_launcher_exports_a_signed_chain_head_at_stop_that_verify_chain_checks(launch_stack):
    stack = launch_stack()
    api = stack.api("operator")
    api.create_session()  # the chain moves after the head recorded at start
    stack.stop()
    exported = json.loads((stack.var_dir / "chain_head.json").read_text())
    assert exported["signature"] and exported["seq"] >= 2
    env = hermetic_env(SKALD_VAR_DIR=str(stack.var_dir), SKALD_CHAIN_HEAD_FILE=str(stack.var_dir / "chain_head.json"))
    done = subprocess.run([sys.executable, "manage.py", "verify_chain"], cwd=BASE_DIR, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"checked against head seq {exported['seq']} (signed, " in done.stdout
    assert str(stack.var_dir / "chain_head.json") in done.stdout


# Issue 28 §4 (a blanked head signature) and §7 (websocket close codes, a socket's scope) run through
# the real stack on both databases in tests/e2e/test_stack_containment.py.


# --- the attacker's battery, on both profiles ------------------------------------------------------------


def replay_battery(stack: Stack) -> list[attack.Answer]:
    tokens = {name: stack.token(name) for name in ("operator", "approver", "reviewer", "auditor")}
    with stack.http(tokens["operator"]) as client:
        session_id = client.post("/api/sessions/", json={"title": "attack"}).json()["id"]
        cases = client.get("/api/cases/").json()
        case_id = (cases["results"] if isinstance(cases, dict) else cases)[0]["id"]  # paginated or not
    return [attack.send("127.0.0.1", stack.port, probe, tokens) for probe in attack.probes(session_id, case_id)]


def assert_no_5xx(answers: list[attack.Answer]) -> None:
    dropped = [a.probe.label for a in answers if a.status == 0]
    failed = [(a.probe.label, a.status) for a in answers if a.status >= 500]
    not_json = [(a.probe.label, a.status) for a in answers if not a.json_body]
    assert (dropped, failed, not_json) == ([], [], []), (dropped, failed, not_json)
    assert all(400 <= a.status < 500 for a in answers if a.probe.label.startswith(("body", "deep", "surrogate",
                                                                                     "NUL", "query", "unknown")))


def test_the_attackers_battery_answers_no_5xx_on_the_embedded_profile(stack):
    answers = replay_battery(stack)
    assert len(answers) >= 90
    assert_no_5xx(answers)


@pytest.fixture
def production_database() -> Iterator[str]:
    """A fresh PostgreSQL database on DATABASE_URL's server (or the local one), dropped afterwards."""
    import psycopg

    server = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    name = f"skald_attack_{os.getpid()}"
    admin = server.replace("postgres://", "postgresql://", 1).rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield admin.rsplit("/", 1)[0].replace("postgresql://", "postgres://", 1) + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_attackers_battery_answers_no_5xx_on_the_production_profile(launch_stack, production_database):
    # PostgreSQL + Redis with SKALD_DEBUG=0, as the issue measured it (13 of 90 answered 500 there).
    stack = launch_stack({
        "DATABASE_URL": production_database, "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/5"),
        "SKALD_DEBUG": "0", "SKALD_SECRET_KEY": "attack-" + "k" * 50, "SKALD_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SKALD_SSL_REDIRECT": "0", "SKALD_AUDIT_KEY": "attack-audit-key", "SKALD_METRICS_TOKEN": "m",
    })
    try:
        answers = replay_battery(stack)
    finally:
        stack.stop()
    assert len(answers) >= 90
    assert_no_5xx(answers)
