"""The API keeps its contract (issue 13): for malformed ids, bodies and content types, every
operation answers a status its schema documents, in the documented content type, with the error
body and a code the schema lists for that status.

Two halves against a real server (pytest-django's live server): explicit malformed requests for
every operation, then schemathesis (pinned in the dev extras) generating positive and negative
requests from the live schema, with a bounded, derandomized example count per operation (drawn once
per schema and reused by the other database's pass: ``generated_cases``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from rest_framework_simplejwt.tokens import RefreshToken
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from approvals.rules.seed import default_rules_ensure
from audit.actors import Actor
from loop.providers.loopback import text_turn
from skald.agents.seed import seed_agents
from skald.api.mcp import SAVE_CODES as MCP_SAVE_CODES
from skald.api.notifications import SAVE_CODES as NOTIFY_SAVE_CODES
from skald.cases.services import case_create
from skald.sessions.services import session_create
from tests.api_client import generated_cases
from tests.api_client.conftest import live_schema
from tests.conftest import make_user
from tests.strength import examples

pytestmark = pytest.mark.db_sensitive

METHODS = ("get", "post", "put", "patch", "delete")
EXAMPLES_PER_MODE = examples(20)  # per operation and generation mode; a developer's run makes 10
MALFORMED_IDS = ("null,null", "abc", "-1", "1.5", "%20")
# Who calls each resource: the role that may, so answers are about input, not permission.
CALLER_BY_TAG = {"sessions": "alice", "cases": "alice", "runs": "alice", "inspect": "alice", "approvals": "carol",
                 "proposals": "bob", "audit": "dave", "tasks": "alice", "policy": "root", "mcp": "root",
                 "notifications": "carol",
                 "auth": None}
NOT_JSON = {
    "form": ("application/x-www-form-urlencoded", b"ticket=502s&title=502s"),
    "multipart": ("multipart/form-data; boundary=xyz",
                  b'--xyz\r\nContent-Disposition: form-data; name="title"\r\n\r\n502s\r\n--xyz--\r\n'),
    "text": ("text/plain", b"502s"),
}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return live_schema()


@pytest.fixture
def server(live_server: Any, settings: Any, tmp_path: Any, script: Callable[..., Any], alice: Any, bob: Any,
           carol: Any, dave: Any) -> Iterator[Server]:
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    seed_agents()
    default_rules_ensure()
    script(text_turn("noted"), delay=0.0).repeat_last = True
    root = make_user("root", superuser=True)  # the policy routes are the admin's
    tokens = {user.username: str(RefreshToken.for_user(user).access_token)
              for user in (alice, bob, carol, dave, root)}
    case = case_create(actor=Actor.system("test"), title="502s", logs=[("app.log", "FATAL pool exhausted")])
    session = session_create(user=alice, agent="troubleshooter")
    with httpx.Client(base_url=live_server.url, timeout=30.0) as http:
        launched = http.post(f"/workflow/cases/{case.pk}/gdl", json={"ticket": "502s"},
                             headers={"Authorization": f"Bearer {tokens['alice']}"})
        assert launched.status_code == 200, launched.text
        yield Server(http, tokens, ids={"case_id": case.pk, "session_id": session.pk, "run_id": launched.json()["id"]})


class Server:
    def __init__(self, http: httpx.Client, tokens: dict[str, str], ids: dict[str, int]) -> None:
        self.http = http
        self.tokens = tokens
        self.ids = ids  # path parameters that name a real row; any other is one that exists nowhere

    def headers(self, operation: dict[str, Any]) -> dict[str, str]:
        caller = CALLER_BY_TAG[operation["tags"][0]]
        return {"Authorization": f"Bearer {self.tokens[caller]}"} if caller else {}


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()
            if method in METHODS]


def assert_documented(operation: dict[str, Any], response: httpx.Response, what: str) -> None:
    """The answer's status is documented, it is JSON, and an error names a code listed for its status."""
    documented = operation["responses"]
    status = str(response.status_code)
    assert status in documented, f"{what}: {status} is not documented ({sorted(documented)}): {response.text[:300]}"
    assert response.headers.get("content-type", "").split(";")[0] == "application/json", (what, response.headers)
    body = response.json()
    if response.status_code >= 400:
        assert set(body) == {"code", "message", "extra"}, (what, body)
        listed = documented[status]["description"].removeprefix("Error codes: ").split(", ")
        assert body["code"] in listed, f"{what}: code {body['code']!r} is not listed for {status} ({listed})"


def integer_ids(operation: dict[str, Any]) -> bool:
    return all(param["schema"].get("type") == "integer" for param in operation["parameters"] if param["in"] == "path")


def filled(path: str, ids: dict[str, int], value: str | None = None) -> str:
    """``path`` with every parameter set to ``value``, by default to a real row's id where ``ids`` has one."""
    return re.sub(r"\{(\w+)\}", lambda match: value if value is not None else str(ids.get(match[1], 987654)), path)


def test_malformed_ids_answer_a_documented_json_status(schema, server):
    checked = 0
    for path, method, operation in operations(schema):
        if "{" not in path:
            continue
        for bad in MALFORMED_IDS:
            url = filled(path, server.ids, bad)
            body = {} if "requestBody" in operation else None
            response = server.http.request(method.upper(), url, json=body, headers=server.headers(operation))
            assert_documented(operation, response, f"{method.upper()} {url}")
            if integer_ids(operation):  # the route itself does not match: no view runs
                assert response.status_code == 404, (url, response.status_code)
            checked += 1
    assert checked >= 20 * len(MALFORMED_IDS) // 2


@pytest.mark.slow
def test_bodies_that_are_not_json_answer_415_and_malformed_json_a_documented_400(schema, server):
    checked = 0
    for path, method, operation in operations(schema):
        if "requestBody" not in operation:
            continue
        url = filled(path, server.ids)
        for name, (content_type, raw) in NOT_JSON.items():
            headers = {**server.headers(operation), "Content-Type": content_type}
            response = server.http.request(method.upper(), url, content=raw, headers=headers)
            assert_documented(operation, response, f"{name} body to {method.upper()} {url}")
            assert response.status_code == 415, (name, url, response.status_code)
        for raw in (b'{"title": ', b"[1, 2", b"\xff\xfe"):
            headers = {**server.headers(operation), "Content-Type": "application/json"}
            response = server.http.request(method.upper(), url, content=raw, headers=headers)
            assert_documented(operation, response, f"malformed JSON {raw!r} to {method.upper()} {url}")
            assert response.status_code == 400, (raw, url, response.status_code)
        for body in ([], "a string", 42, None):  # JSON, but not the object the operation takes
            headers = {**server.headers(operation), "Content-Type": "application/json"}
            response = server.http.request(method.upper(), url, content=json.dumps(body).encode(), headers=headers)
            assert_documented(operation, response, f"JSON {body!r} to {method.upper()} {url}")
        checked += 1
    assert checked >= 14


def test_a_key_the_schema_does_not_name_is_400_unknown_field(schema, server):
    """Request bodies are closed in the document and on the server: an extra key (a misspelt
    ``reason``) is refused by name, never silently ignored."""
    components = schema["components"]["schemas"]
    checked = 0
    for path, method, operation in operations(schema):
        body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
        if body is None:
            continue
        variants = [body, *components[body["$ref"].rsplit("/", 1)[-1]].get("oneOf", [])]
        closed = [components[ref["$ref"].rsplit("/", 1)[-1]] for ref in variants]
        assert all(c["additionalProperties"] is False for c in closed if c.get("type") == "object"), (method, path)
        url = filled(path, server.ids)
        response = server.http.request(method.upper(), url, json={"reasn": "typo"}, headers=server.headers(operation))
        assert_documented(operation, response, f"an unknown key to {method.upper()} {url}")
        assert (response.status_code, response.json()["code"]) == (400, "unknown_field"), (url, response.text)
        assert response.json()["extra"]["fields"] == {"reasn": ["unknown field"]}
        checked += 1
    assert checked >= 14


# positive_data_acceptance: a request the schema calls valid is never refused with a 400 (issue 35):
# bodies are closed, strings NUL-free, trimmed strings non-blank, names that exist nowhere a 404.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          positive_data_acceptance]
# The few refusals a schema-valid request may still get, by operation, each for a reason no schema can
# state (positive_data_acceptance already admits 401, 403, 404 and 409 for the state of the server):
# - a conditional write whose If-Match names another version than the row's: 412, the state of the row
#   (the value is well formed; a random one is simply never the current ETag);
# - a policy document: YAML in a string, with a JSON Schema of its own that OpenAPI cannot apply to a
#   string's content; what does not hold is 400 policy_invalid, as the command answers (exit 2);
# - a tripwire regular expression the detector refuses (not a regex, unbounded backtracking, matching
#   the empty text): another language in a string, checked by the service the admin's form uses.
_STALE = frozenset({(412, "precondition_failed")})
STATE_REFUSALS: dict[str, frozenset[tuple[int, str]]] = {
    **{f"policy_{kind}_{verb}": _STALE for kind in ("rule", "group", "tripwire_pattern", "tripwire_allow")
       for verb in ("update", "delete")},
    "policy_agent_update": _STALE,
    "policy_plan": frozenset({(400, "policy_invalid")}),
    "policy_apply": frozenset({(400, "policy_invalid")}),
    "policy_tripwire_pattern_create": frozenset({(400, "tripwire_pattern_invalid")}),
    "policy_tripwire_pattern_update": _STALE | {(400, "tripwire_pattern_invalid")},
    "policy_tripwire_allow_create": frozenset({(400, "tripwire_allow_invalid")}),
    "policy_tripwire_allow_update": _STALE | {(400, "tripwire_allow_invalid")},
    # - an MCP server's configuration: the stdio allowlist, the SSRF screen (DNS included) and the
    #   secret-file paths are the deployment's and the network's state, checked by the service at save.
    **{f"mcp_server_{verb}": frozenset((400, code) for code in MCP_SAVE_CODES) for verb in ("create", "update")},
    # - an MCP elicitation's answer: the requested schema is the server's, stored with the card.
    "mcp_elicitation_answer": frozenset({(400, "mcp_elicitation_content_invalid")}),
    # - a notification receiver: the SSRF screen (DNS included) and the allowed ranges are the
    #   deployment's and the network's state; an e-mail address's syntax is the validator's.
    **{f"notification_subscription_{verb}": frozenset((400, code) for code in NOTIFY_SAVE_CODES)
       for verb in ("create", "update")},
}


def fuzz(operation: schemathesis.APIOperation, raw: dict[str, Any], mode: schemathesis.GenerationMode,
         base_url: str, headers: dict[str, str], digest: str) -> None:
    """``EXAMPLES_PER_MODE`` derandomized cases of one operation: the built-in checks, then the code.

    The cases are drawn once per schema (``generated_cases``): the other database's pass sends the
    same requests without drawing them again."""
    refusals = STATE_REFUSALS.get(raw.get("operationId", ""), frozenset())
    for case in generated_cases.cases(operation, mode, examples=EXAMPLES_PER_MODE, digest=digest):
        response = case.call(base_url=base_url, headers=headers)
        if response.status_code >= 400 and (response.status_code, response.json().get("code")) in refusals:
            case.validate_response(response, checks=[c for c in CHECKS if c is not positive_data_acceptance])
        else:
            case.validate_response(response, checks=CHECKS)
        if response.status_code >= 400:
            listed = raw["responses"][str(response.status_code)]["description"]
            code = response.json()["code"]
            assert code in listed.removeprefix("Error codes: ").split(", "), (case.path, code, listed)


# The operations are shared among shards, so xdist spreads the suite's longest test over its workers
# (each shard is a test with its own server; together they cover every operation once).
SHARDS = 4


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_generated_requests_get_documented_answers(schema, server, shard):
    """schemathesis: positive and negative cases per operation; status, content type, body schema, code."""
    base_url = str(server.http.base_url).rstrip("/")
    assert set(STATE_REFUSALS) <= {op["operationId"] for _, _, op in operations(schema)}  # no stale exception
    digest = generated_cases.schema_digest(schema)
    ran: list[str] = []
    failures: list[str] = []
    for result in list(schemathesis.openapi.from_dict(schema).get_all_operations())[shard::SHARDS]:
        operation = result.ok()
        raw = schema["paths"][operation.path][operation.method.lower()]
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            try:
                fuzz(operation, raw, mode, base_url, server.headers(raw), digest)
            except (AssertionError, BaseExceptionGroup) as failure:  # report every operation, not the first
                failures.append(f"{operation.label} ({mode.value}): {str(failure)[:1500]}")
        ran.append(operation.label)
    assert len(operations(schema)) >= 33
    assert len(ran) == len(operations(schema)[shard::SHARDS])  # schemathesis left no operation out
    assert not failures, "\n\n".join(failures)
