from __future__ import annotations

import json
import re

import pytest
from django.urls import get_resolver

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_it_issues_a_jwt_for_a_valid_login(alice, client):
    response = client.post("/api/auth/token/", {"username": "alice", "password": PASSWORD},
                           content_type="application/json")
    assert response.status_code == 200
    assert set(response.json()) == {"access", "refresh"}
    refreshed = client.post("/api/auth/token/refresh/", {"refresh": response.json()["refresh"]},
                            content_type="application/json")
    assert refreshed.status_code == 200 and "access" in refreshed.json()


def test_it_refuses_a_bad_login_with_a_code(alice, client):
    response = client.post("/api/auth/token/", {"username": "alice", "password": "nope"},
                           content_type="application/json")
    assert response.status_code == 401
    assert response.json()["code"] == "no_active_account"


def test_it_refuses_a_login_without_a_password_and_a_bad_refresh_token_with_codes(alice, client):
    missing = client.post("/api/auth/token/", {"username": "alice"}, content_type="application/json")
    assert missing.status_code == 400 and missing.json()["code"] == "invalid"
    assert "password" in missing.json()["extra"]["fields"]
    bad = client.post("/api/auth/token/refresh/", {"refresh": "not-a-token"}, content_type="application/json")
    assert bad.status_code == 401 and bad.json()["code"] == "token_not_valid"


FORM = "application/x-www-form-urlencoded"
BODIES = {
    "form": ({"content_type": FORM}, "title=502s"),
    "multipart": ({}, {"title": "502s"}),  # the test client's default encoding
    "text": ({"content_type": "text/plain"}, "title: 502s"),
    "xml": ({"content_type": "application/xml"}, "<session><title>502s</title></session>"),
}


@pytest.mark.parametrize("route", ["/api/sessions/", "/api/auth/token/", "/api/cases/", "/workflow/cases/1/gdl"])
@pytest.mark.parametrize("encoding", sorted(BODIES))
def test_a_body_that_is_not_json_is_a_415_with_the_error_body(alice, api, route, encoding):
    kwargs, body = BODIES[encoding]
    response = api(alice).generic("POST", route, body, **kwargs) if isinstance(body, str) \
        else api(alice).post(route, body, format="multipart")
    assert response.status_code == 415, (route, response.status_code, response.content)
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "unsupported_media_type"
    assert set(response.json()) == {"code", "message", "extra"}


def test_a_body_that_is_not_valid_json_is_a_400_with_a_code(alice, api):
    response = api(alice).generic("POST", "/api/sessions/", '{"agent": ', content_type="application/json")
    # DRF's parser answers parse_error; the request guard, where installed, refuses first (invalid_json).
    assert response.status_code == 400 and response.json()["code"] in {"parse_error", "invalid_json"}


PUBLIC = ("auth/token/", "auth/token/refresh/", "schema/", "docs/", "redoc/")


def _routes(prefix: str) -> list[str]:
    """Every route under ``prefix``, with path parameters filled in."""
    found: list[str] = []

    def walk(patterns, base: str) -> None:
        for pattern in patterns:
            text = base + str(pattern.pattern)
            if hasattr(pattern, "url_patterns"):
                walk(pattern.url_patterns, text)
            else:
                found.append(re.sub(r"<(?:str|int|slug):\w+>", "1", text))

    for top in get_resolver().url_patterns:
        if str(top.pattern) == prefix:
            walk(top.url_patterns, prefix)
    return found


def test_every_protected_api_and_workflow_route_answers_401_with_a_code(client):
    routes = [r for r in _routes("api/") if r.removeprefix("api/") not in PUBLIC] + _routes("workflow/")
    assert len(routes) > 20
    for route in routes:
        for method in (client.get, client.post):
            response = method("/" + route)
            assert response.status_code == 401, (route, response.status_code)
            body = response.json()
            assert set(body) == {"code", "message", "extra"} and body["code"] == "not_authenticated", route


def test_schema_and_docs_are_public(client):
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/redoc/").status_code == 200


def test_unknown_api_route_is_a_json_404(client):
    response = client.get("/api/no-such-thing/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_healthz_is_public(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_reports_the_provider_status_and_nothing_else_of_the_profile(client):
    body = client.get("/readyz").json()
    assert body["gdl_provider"] == "disabled"
    assert body["database"] == "ok"
    assert set(body) == {"status", "database", "channel_layer", "workers", "clusters", "gdl_provider"}


def test_metrics_render_prometheus_text(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert b"skald_exchange_outcomes" in response.content


def test_the_delegation_tools_argument_schemas_are_published_and_stay_intact(client):
    from skald.tools.delegation_schemas import EXECUTE_TASK_SCHEMA

    before = json.dumps(EXECUTE_TASK_SCHEMA, sort_keys=True)
    schemas = client.get("/api/schema/", {"format": "json"}).json()["components"]["schemas"]
    assert {"ExecuteTaskArguments", "ExecuteSubtaskArguments", "ListAgentsArguments", "CronArguments"} <= set(schemas)
    assert schemas["ExecuteTaskArguments"]["required"] == ["agent", "task"]
    # Generating the document must not rewrite the schemas the tools validate with.
    assert json.dumps(EXECUTE_TASK_SCHEMA, sort_keys=True) == before
