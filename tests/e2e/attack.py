"""The attacker's battery of issue 11 §2, replayed over real HTTP against a running stack.

Raw sockets, not an HTTP client: the client must not fix up what an attacker sends (NULs, broken
escapes, 100 KB request lines). Each probe answers ``(label, status, json_ok)``; the caller counts
5xx answers (there must be none) and non-JSON answers under the API prefixes.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass

BIG = 2**63
DEEP = "[" * 1_500 + "]" * 1_500
ROLE_FOR = {"/workflow/": "operator", "/api/approvals": "approver", "/api/tools": "approver",
            "/api/proposals": "reviewer", "/api/audit": "auditor"}


@dataclass(frozen=True)
class Probe:
    label: str
    method: str
    target: str
    body: bytes = b""
    authenticated: bool = True
    content_type: str = "application/json"


@dataclass(frozen=True)
class Answer:
    probe: Probe
    status: int
    json_body: bool


def probes(session_id: int, case_id: int) -> Iterator[Probe]:
    """The inputs that answered 500 (or no answer) in the issue, spread over every route they reach."""
    posts = ["/api/auth/token/", "/api/auth/token/refresh/", "/api/sessions/", f"/api/sessions/{session_id}/messages/",
             f"/api/sessions/{session_id}/stop/", "/api/cases/", "/api/runs/1/stop/", "/api/approvals/x/resolve",
             f"/api/approvals/batches/{session_id}/b/resolve", "/api/tools/1/resolve", "/api/proposals/1/accept",
             "/api/proposals/1/reject", f"/workflow/cases/{case_id}/gdl", "/workflow/runs/1/handoff/decision",
             "/workflow/runs/1/back-referral/return"]
    huge = json.dumps({"content": "a" * 2_700_000, "ticket": "a" * 2_700_000}).encode()
    for path in posts:
        yield Probe(f"body 2.7 MB {path}", "POST", path, huge, authenticated=not path.startswith("/api/auth"))
    yield Probe("body 2.7 MB token, unauthenticated", "POST", "/api/auth/token/", huge, authenticated=False)
    yield Probe("message over its limit", "POST", f"/api/sessions/{session_id}/messages/",
                json.dumps({"content": "a" * 600_000}).encode())
    yield Probe("ticket over its limit", "POST", f"/workflow/cases/{case_id}/gdl",
                json.dumps({"ticket": "a" * 70_000}).encode())
    yield Probe("case over its limit", "POST", "/api/cases/", json.dumps({"title": "t", "description": "a" * 70_000})
                .encode())
    for path in posts:
        yield Probe(f"deep JSON {path}", "POST", path, b'{"content": ' + DEEP.encode() + b', "ticket": 1}')
    yield Probe("deep explain args", "GET", "/api/approval/explain?tool=read_file&args=" + DEEP)
    for text in ("\\ud800", "a\\udfffb", "\\udc00"):
        yield Probe(f"surrogate ticket {text}", "POST", f"/workflow/cases/{case_id}/gdl",
                    b'{"ticket": "' + text.encode() + b'"}')
        yield Probe(f"surrogate message {text}", "POST", f"/api/sessions/{session_id}/messages/",
                    b'{"content": "' + text.encode() + b'"}')
        yield Probe(f"surrogate case {text}", "POST", "/api/cases/", b'{"title": "' + text.encode() + b'"}')
    for text in ("\\u0000", "a\\u0000b"):
        yield Probe(f"NUL ticket {text}", "POST", f"/workflow/cases/{case_id}/gdl", b'{"ticket": "' + text.encode()
                    + b'"}')
        yield Probe(f"NUL message {text}", "POST", f"/api/sessions/{session_id}/messages/",
                    b'{"content": "' + text.encode() + b'"}')
        yield Probe(f"NUL case {text}", "POST", "/api/cases/", b'{"title": "' + text.encode() + b'"}')
        yield Probe(f"NUL note {text}", "POST", "/workflow/runs/1/back-referral/return",
                    b'{"note": "' + text.encode() + b'"}')
    for target in ("/api/runs/?status=%00", "/api/approvals/?status=%00", "/api/proposals/?status=%00",
                   "/api/sessions/?status=%00", "/api/approval/explain?tool=read_file&agent=%00",
                   "/api/approval/tools?agent=%00", "/api/approval/explain?tool=%00",
                   "/api/runs/?case=%00", "/api/sessions/%00/", "/api/cases/?q=%ED%A0%80"):
        yield Probe(f"NUL/broken query {target}", "GET", target)
    yield Probe("NUL in a batch path", "POST", f"/api/approvals/batches/{session_id}/a%00b/resolve",
                b'{"decision": "approve"}')
    yield Probe("NUL in a request id", "POST", "/api/approvals/%00/resolve", b'{"decision": "approve"}')
    for target in (f"/api/sessions/{BIG}/", f"/api/sessions/{BIG}/events/", f"/api/sessions/1/exchanges/{BIG}/",
                   f"/api/runs/{BIG}/", f"/api/runs/{BIG}/events/", f"/api/cases/{BIG}/", f"/api/proposals/{BIG}/",
                   f"/api/runs/{BIG}/replay-verify", f"/api/runs/?case={BIG}", f"/api/runs/?session={BIG}",
                   f"/api/proposals/?run={BIG}", f"/api/sessions/{session_id}/events/?after={BIG}",
                   f"/api/runs/?limit={BIG}", f"/api/approvals/?offset={BIG}", f"/api/cases/{10**30}/"):
        yield Probe(f"2**63 {target}", "GET", target)
    yield Probe("2**63 tool call", "POST", f"/api/tools/{BIG}/resolve", b'{"decision": "approve"}')
    yield Probe("2**63 gdl", "POST", f"/workflow/cases/{BIG}/gdl", b'{"ticket": "t"}')
    for size in (13_000, 30_000, 100_000):
        yield Probe(f"query string {size} B", "GET", "/api/sessions/?q=" + "a" * size)
    for target in ("/api/nope", "/api/sessions/abc/", "/workflow/nope", "/workflow/cases/1/gdl/x", "/api/"):
        yield Probe(f"unknown path {target}", "GET", target)
        yield Probe(f"unknown path {target}, anonymous", "GET", target, authenticated=False)


def send(host: str, port: int, probe: Probe, tokens: dict[str, str]) -> Answer:
    """One probe over a fresh HTTP/1.0 connection; a dropped connection counts as status 0."""
    headers = [f"{probe.method} {probe.target} HTTP/1.0", f"Host: {host}"]
    if probe.authenticated:
        role = next((name for prefix, name in ROLE_FOR.items() if probe.target.startswith(prefix)), "operator")
        headers.append(f"Authorization: Bearer {tokens[role]}")
    if probe.body or probe.method == "POST":
        headers += [f"Content-Type: {probe.content_type}", f"Content-Length: {len(probe.body)}"]
    raw = ("\r\n".join(headers) + "\r\n\r\n").encode("utf-8", "surrogatepass") + probe.body
    chunks: list[bytes] = []
    try:
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(raw)
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError:
        pass  # a reset after an early answer still leaves what was read
    answer = b"".join(chunks)
    if not answer:
        return Answer(probe, 0, False)
    head, _, payload = answer.partition(b"\r\n\r\n")
    status = int(head.split(b"\r\n", 1)[0].split()[1])
    try:
        body = json.loads(payload)
        json_ok = isinstance(body, dict) and set(body) >= {"code", "message", "extra"} if status >= 400 else True
    except ValueError:
        json_ok = False
    return Answer(probe, status, json_ok)
