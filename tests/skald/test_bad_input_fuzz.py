"""Generated malformed input against every route the URL resolver knows (issue 11 §2).

For each example: a route from the resolver, its path ids and strings filled with hostile values,
a hostile query string, a method, a hostile JSON body, as anonymous or as a user holding every role.
Under ``/api/`` and ``/workflow/`` the answer is never a 5xx, always the ``{code, message, extra}``
JSON body, and its status is one of the documented ones (docs/api-limits.md); anywhere else it is
never a 5xx. ``SKALD_FUZZ_EXAMPLES`` sets the example count (by default tests/strength.py's: the suite
must stay fast).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from skald.agents.seed import seed_agents
from skald.core.roles import Role
from tests.conftest import make_user
from tests.strength import examples

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

# Full strength (CI) sends 400 requests per database, a developer's run 20 (tests/strength.py).
EXAMPLES = int(os.environ.get("SKALD_FUZZ_EXAMPLES") or examples(400))
# 412/428: the policy routes' conditional writes (If-Match stale, or missing: skald/core/api/conditional.py).
DOCUMENTED = {200, 201, 202, 400, 401, 403, 404, 405, 409, 410, 412, 413, 414, 415, 428}
# Routes with a status of their own: /readyz answers 503 while no worker runs (documented probe).
OWN_STATUS = {"readyz": {503}}


def routes() -> list[str]:
    """Every route pattern (``api/sessions/<int:session_id>/``) of the resolver, admin included."""
    from django.urls import URLResolver, get_resolver
    from django.urls.resolvers import RoutePattern

    found: list[str] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for item in patterns:
            if isinstance(item, URLResolver):
                walk(item.url_patterns, prefix + str(item.pattern))
            elif isinstance(item.pattern, RoutePattern) or "(?P<" not in str(item.pattern):
                found.append(prefix + str(item.pattern).lstrip("^").rstrip("$"))

    walk(get_resolver().url_patterns, "")
    return sorted(set(found))


HUGE = [2**63 - 1, 2**63, 2**64, 10**30, 0, 1, 7]
hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "%00", "../../etc/passwd", "' OR 1=1 --", "💥" * 50,
                     "9" * 40, "-1", "null", "{}", "[" * 2000, "a" * 20_000]),
)
hostile_int = st.one_of(st.sampled_from(HUGE), st.integers(min_value=0, max_value=2**80))
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                      st.floats(allow_nan=False, allow_infinity=False), hostile_text)
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(st.one_of(st.sampled_from(["content", "ticket", "decision", "note",
                                                                        "title", "agent", "reason", "username",
                                                                        "password", "refresh", "logs"]),
                                                      hostile_text), inner, max_size=4), max_leaves=12)


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


raw_body = st.one_of(
    json_value.map(json.dumps),
    st.builds(lambda d: json.dumps({"content": "x", "ticket": "t", "n": json.loads(deep(50))}) if d < 60
              else '{"content": ' + deep(d) + "}", st.sampled_from([10, 1_500, 5_000, 100_000])),
    st.sampled_from(['{"ticket": "\\u0000"}', '{"ticket": "\\ud800"}', '{"content": "\\udc00x"}', "not json",
                     '{"a":', "\xff\xfe", '{"ticket": ' + str(2**70) + "}", "[]", '""', "null"]),
    st.just('{"content": "' + "a" * 3_000_000 + '"}'),
)
query_keys = st.sampled_from(["status", "agent", "case", "session", "after", "limit", "offset", "tool", "args",
                              "user", "run", "ordering", "q", "token"])
query = st.dictionaries(query_keys, st.one_of(hostile_text, hostile_int.map(str), st.just(deep(1_500))), max_size=3)


def fill(route: str, data: st.DataObject) -> str:
    def value(match: re.Match[str]) -> str:
        if match.group(1) == "int":
            return str(data.draw(hostile_int))
        return quote(data.draw(hostile_text), safe="", errors="surrogatepass")

    return "/" + re.sub(r"<(?:(\w+):)?\w+>", value, route)


def encode_query(params: dict[str, str]) -> str:
    return "&".join(f"{quote(k)}={quote(v, safe='', errors='surrogatepass')}" for k, v in params.items())


@pytest.fixture
def root(db: None) -> Any:
    seed_agents()
    return make_user("root", *[role.value for role in Role], superuser=True)


@hsettings(max_examples=EXAMPLES, deadline=None, derandomize=True,
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                  HealthCheck.data_too_large])
@given(data=st.data())
def test_no_route_answers_malformed_input_with_a_5xx(api, root, settings, data):
    settings.SKALD_GDL_WAIT_SECONDS = 0  # a valid launch must not hold the example for 25 s
    every = routes()
    api_routes = [route for route in every if route.startswith(("api/", "workflow/"))]
    # The admin's many routes would crowd the API out: they get one example in six.
    route = data.draw(st.one_of(st.sampled_from(api_routes), st.sampled_from(api_routes),
                                st.sampled_from(api_routes), st.sampled_from(api_routes),
                                st.sampled_from(api_routes), st.sampled_from(every)))
    path = fill(route, data)
    params = data.draw(query)
    target = path + ("?" + encode_query(params) if params else "")
    method = data.draw(st.sampled_from(["get", "post", "put", "patch", "delete"]))
    body = data.draw(raw_body) if method != "get" else None
    user = data.draw(st.sampled_from([None, root]))
    client = api(user)
    if user is not None and route.startswith("admin/"):
        client.force_login(user)  # the admin authenticates by session
    kwargs: dict[str, Any] = {"content_type": "application/json"} if body is not None else {}
    response = getattr(client, method)(target, body, **kwargs) if body is not None else getattr(client, method)(
        target)
    name = route.strip("/")
    if os.environ.get("FUZZ_LOG"):
        with open(os.environ["FUZZ_LOG"], "a") as log:
            log.write(f"{response.status_code} {method} {target[:80]!r} {(body or '')[:60]!r}\n")
    assert response.status_code < 500 or response.status_code in OWN_STATUS.get(name, set()), (
        method, target[:300], (body or "")[:300], response.status_code, response.content[:500])
    if path.startswith(("/api/", "/workflow/")) and response.status_code >= 400:
        assert response.status_code in DOCUMENTED, (method, target[:300], response.status_code)
        assert "application/json" in response["Content-Type"], (method, target[:300], response.content[:300])
        payload = response.json()
        assert set(payload) == {"code", "message", "extra"} and isinstance(payload["code"], str), payload
