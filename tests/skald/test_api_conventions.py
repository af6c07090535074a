from __future__ import annotations

import re

import pytest
from django.urls import get_resolver

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_it_issues_a_jwt_for_a_valid_login(alice, client):
    response = client.post("/api/auth/token/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 200
    assert set(response.json()) == {"access", "refresh"}
    refreshed = client.post("/api/auth/token/refresh/", {"refresh": response.json()["refresh"]})
    assert refreshed.status_code == 200 and "access" in refreshed.json()


def test_it_refuses_a_bad_login_with_a_code(alice, client):
    response = client.post("/api/auth/token/", {"username": "alice", "password": "nope"})
    assert response.status_code == 401
    assert response.json()["code"] == "no_active_account"


PUBLIC = ("auth/token/", "auth/token/refresh/", "schema/", "docs/")


def _routes(prefix: str) -> list[str]:
    """Every route under ``prefix``, with path parameters filled in."""
    found: list[str] = []

    def walk(patterns, base: str) -> None:
        for pattern in patterns:
            text = base + str(pattern.pattern)
            if hasattr(pattern, "url_patterns"):
                walk(pattern.url_patterns, text)
            else:
                found.append(re.sub(r"<(?:str|int):\w+>", "1", text))

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
