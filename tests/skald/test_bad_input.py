"""The attacker's inputs of issue 11 §2, each answered with a JSON 4xx of a stable code, storing
nothing, on SQLite and PostgreSQL (the request guard: skald/core/api/middleware.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection

from audit.actors import Actor
from audit.models import AuditEvent
from loop.models import Exchange, Session
from skald.agents.seed import seed_agents
from skald.cases.services import case_create
from skald.core.roles import Role
from skald.models import Case, Run
from skald.sessions import services
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.db_sensitive]

BIG = 2**63


@pytest.fixture
def root(db: None) -> Any:
    return make_user("root", *[role.value for role in Role])  # every role: refusals are about input only


@pytest.fixture
def world(alice: Any) -> dict[str, Any]:
    seed_agents()
    case = case_create(actor=Actor.system("test"), title="502s", logs=[])
    session = services.session_create(user=alice, title="t")
    return {"case": case, "session": session}


def stored() -> tuple[int, int, int, int, int]:
    return (AuditEvent.objects.count(), Exchange.objects.count(), Run.objects.count(), Session.objects.count(),
            Case.objects.count())


def assert_refused(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert "application/json" in response["Content-Type"]
    body = response.json()
    assert set(body) == {"code", "message", "extra"}
    if code is not None:
        assert body["code"] == code, body
    return body


def post_raw(client: Any, path: str, raw: str | bytes, **headers: Any) -> Any:
    return client.generic("POST", path, raw, content_type="application/json", **headers)


POST_ROUTES = ["/api/auth/token/", "/api/auth/token/refresh/", "/api/sessions/", "/api/sessions/{s}/messages/",
               "/api/sessions/{s}/stop/", "/api/cases/", "/api/runs/1/stop/", "/api/approvals/x/resolve",
               "/api/approvals/batches/1/b/resolve", "/api/tools/1/resolve", "/api/proposals/1/accept",
               "/workflow/cases/{c}/gdl", "/workflow/runs/1/handoff/decision",
               "/workflow/runs/1/back-referral/return"]


@pytest.mark.parametrize("route", POST_ROUTES)
def test_a_body_over_the_upload_limit_is_413_on_every_post_route(api, root, world, route):
    path = route.format(s=world["session"].pk, c=world["case"].pk)
    before = stored()
    for client in (api(None), api(root)):
        body = json.dumps({"content": "a" * 2_700_000})
        assert_refused(post_raw(client, path, body), 413, "request_too_large")
    assert stored() == before


@pytest.mark.parametrize(("route", "limit"), [("/api/sessions/{s}/messages/", 512 * 1024),
                                               ("/workflow/cases/{c}/gdl", 64 * 1024), ("/api/cases/", 64 * 1024)])
def test_each_route_has_its_own_size_limit(api, root, world, route, limit):
    path = route.format(s=world["session"].pk, c=world["case"].pk)
    over = json.dumps({"content": "a" * limit})
    before = stored()
    assert assert_refused(post_raw(api(root), path, over), 413, "request_too_large")["extra"] == {"limit": limit}
    assert stored() == before


@pytest.mark.parametrize(("content", "status"), [
    ("\x01" * 10_000, 202),  # 60 KB of escaped JSON: under the body limit and the store's row cap
    ("a" * (64 * 1024), 400),  # at the service's limit: the stored row would pass the store's cap (was a 500)
    ("\x01" * (64 * 1024), 400),  # 390 KB of JSON: the body limit lets it through to the service's refusal
])
def test_the_service_decides_messages_the_body_limit_lets_through(api, alice, world, content, status):
    before = stored()
    response = post_raw(api(alice), f"/api/sessions/{world['session'].pk}/messages/", json.dumps({"content": content}))
    assert response.status_code == status, response.content[:300]
    if status == 400:
        assert response.json()["code"] == "message_too_large" and stored() == before


@pytest.mark.parametrize("depth", [65, 1_500, 100_000])
def test_deeply_nested_json_is_400(api, alice, world, depth):
    nested = "[" * depth + "]" * depth
    before = stored()
    assert_refused(post_raw(api(alice), f"/api/sessions/{world['session'].pk}/messages/", '{"content": ' + nested
                            + "}"), 400, "json_too_deep")
    assert stored() == before


@pytest.mark.parametrize(("depth", "status"), [(65, 400), (1_500, 400), (100_000, 414)])
def test_deeply_nested_explain_args_are_a_4xx(api, root, depth, status):
    # 1,500 levels percent-encode to 9 KB, under the query limit: the JSON check answers; far deeper
    # nesting no longer fits a query string at all.
    nested = "[" * depth + "]" * depth
    response = api(root).get("/api/approval/explain", {"tool": "read_file", "args": nested})
    assert_refused(response, status)


@pytest.mark.parametrize("ticket", ["\\ud800", "a\\udfffb", "\\u0000", "a\\u0000b"])
def test_a_lone_surrogate_or_nul_in_a_ticket_is_400_and_stores_nothing(api, alice, world, ticket):
    before = stored()
    response = post_raw(api(alice), f"/workflow/cases/{world['case'].pk}/gdl", '{"ticket": "' + ticket + '"}')
    assert assert_refused(response, 400)["code"] in {"invalid_unicode", "nul_character"}
    assert stored() == before


@pytest.mark.parametrize("target", [
    "/api/runs/?status=%00", "/api/approvals/?status=a%00", "/api/proposals/?status=%00",
    "/api/approval/explain?tool=read_file&agent=%00", "/api/approval/tools?agent=%00",
    "/api/approvals/batches/1/a%00b/resolve", "/api/approvals/%00/resolve", "/api/sessions/?x=%ED%A0%80",
])
def test_a_nul_or_a_broken_utf8_sequence_in_a_path_or_filter_is_400(api, root, world, target):
    method = "post" if target.endswith("resolve") else "get"
    before = stored()
    response = getattr(api(root), method)(target, {"decision": "approve"} if method == "post" else None,
                                           format="json" if method == "post" else None)
    assert assert_refused(response, 400)["code"] in {"nul_character", "invalid_unicode"}
    assert stored() == before


@pytest.mark.parametrize("target", [
    f"/api/sessions/{BIG}/", f"/api/sessions/{2**64}/events/", f"/api/runs/{BIG}/", f"/api/cases/{10**30}/",
    f"/api/proposals/{BIG}/", f"/api/runs/{BIG}/replay-verify", f"/api/sessions/1/exchanges/{BIG}/",
])
def test_an_id_beyond_64_bits_in_a_path_is_404(api, root, world, target):
    assert_refused(api(root).get(target), 404, "not_found")


@pytest.mark.parametrize("target", [
    f"/api/runs/?case={BIG}", f"/api/runs/?session={2**64}", f"/api/sessions/1/events/?after={BIG}",
    f"/api/proposals/?run={BIG}", f"/api/runs/?limit={BIG}", f"/api/approvals/?offset={BIG}",
])
def test_an_integer_beyond_64_bits_in_a_filter_is_a_4xx(api, root, world, target):
    response = api(root).get(target)
    assert response.status_code in (200, 400, 404), (target, response.status_code, response.content[:300])
    assert "application/json" in response["Content-Type"]


def test_a_30_kb_query_string_is_414_in_json(api, root, world):
    assert_refused(api(root).get("/api/sessions/?q=" + "a" * 30_000), 414, "uri_too_long")


@pytest.mark.parametrize("path", ["/api/nope", "/api/sessions/abc/", "/workflow/x", "/workflow/cases/1/gdl/extra"])
def test_unknown_api_paths_are_a_json_404_even_with_debug_on(api, root, settings, path):
    settings.DEBUG = True
    body = assert_refused(api(root).get(path), 404, "not_found")
    assert "urlpatterns" not in json.dumps(body).lower()


def test_a_wrong_method_on_a_plain_view_is_a_json_405(api, root):
    response = api(root).delete("/api/sessions/")
    assert_refused(response, 405)


def test_the_guard_never_lets_a_nul_reach_postgresql(api, alice, world):
    # The attack that answered 500 on PostgreSQL: a NUL in a ticket reaching an INSERT.
    response = post_raw(api(alice), f"/workflow/cases/{world['case'].pk}/gdl", json.dumps({"ticket": "a\x00"}))
    assert_refused(response, 400, "nul_character")
    assert connection.vendor in {"sqlite", "postgresql"}


def test_an_unknown_format_query_parameter_is_ignored_not_a_404(api, alice):
    """DRF's URL format override answered ?format=<no renderer> with 404 (found by the contract test on
    a list route): Skald renders JSON only, so an unknown format is ignored."""
    response = api(alice).get("/api/sessions/", {"format": "null"})
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
