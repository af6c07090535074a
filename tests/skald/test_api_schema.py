"""The OpenAPI schema external callers generate clients from (issue 15): JSON in and out, a readable
operationId, a summary and a resource tag on every operation, and an error body for every error
status it lists."""

from __future__ import annotations

import re
from typing import Any

import pytest

from skald.core.api.schema import TAGS, route_tag

METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    return dict(response.json())


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in schema["paths"].items()
            for method, op in item.items() if method in METHODS]


def test_every_operation_has_a_readable_id_a_summary_and_a_resource_tag(schema):
    found = operations(schema)
    assert len(found) >= 33
    ids = [op["operationId"] for _, _, op in found]
    assert len(set(ids)) == len(ids)
    for path, method, op in found:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+", op["operationId"]), (path, method, op["operationId"])
        assert op.get("summary", "").strip(), (path, method)
        assert op["tags"] == [route_tag(path)] and op["tags"][0] in TAGS, (path, method, op["tags"])
    assert {tag["name"] for tag in schema["tags"]} == TAGS


def test_request_bodies_are_declared_as_json_only(schema):
    bodies = [(path, method, op["requestBody"]) for path, method, op in operations(schema) if "requestBody" in op]
    assert len(bodies) >= 14
    for path, method, body in bodies:
        assert set(body["content"]) == {"application/json"}, (path, method)


def test_an_operation_with_a_body_documents_its_parse_error_and_415(schema):
    for path, method, op in operations(schema):
        if "requestBody" not in op:
            continue
        responses = op["responses"]
        assert "parse_error" in responses["400"]["description"], (path, method)
        assert responses["415"]["description"] == "Error codes: unsupported_media_type", (path, method)


def test_every_error_status_answers_the_error_body_and_names_its_codes(schema):
    for path, method, op in operations(schema):
        for status, response in op["responses"].items():
            assert set(response.get("content", {})) == {"application/json"}, (path, method, status)
            if int(status) < 400:
                continue
            media = response["content"]["application/json"]
            assert media["schema"] == {"$ref": "#/components/schemas/Error"}, (path, method, status)
            codes = response["description"].removeprefix("Error codes: ").split(", ")
            assert codes and {example["value"]["code"] for example in media["examples"].values()} == set(codes)


def test_the_token_endpoints_document_their_400_and_401(schema):
    obtain = schema["paths"]["/api/auth/token/"]["post"]
    refresh = schema["paths"]["/api/auth/token/refresh/"]["post"]
    assert {"200", "400", "401", "415"} <= set(obtain["responses"])
    assert "invalid" in obtain["responses"]["400"]["description"]
    assert "no_active_account" in obtain["responses"]["401"]["description"]
    assert {"200", "400", "401", "415"} <= set(refresh["responses"])
    assert "token_not_valid" in refresh["responses"]["401"]["description"]
    assert "security" not in obtain and "security" not in refresh  # they need no token


def test_the_description_says_how_to_authenticate(schema):
    text = schema["info"]["description"]
    assert "/api/auth/token/" in text and "Authorization: Bearer" in text and "/api/auth/token/refresh/" in text



def test_the_request_guards_codes_are_documented_where_it_is_installed(settings):
    from drf_spectacular.generators import SchemaGenerator

    from skald.core.api.schema import GUARD_BODY_ERRORS, GUARD_ERRORS, REQUEST_GUARD

    # Generating the schema runs no middleware: the setting alone decides what is documented.
    settings.MIDDLEWARE = [REQUEST_GUARD, *(m for m in settings.MIDDLEWARE if m != REQUEST_GUARD)]
    guarded = SchemaGenerator().get_schema(request=None, public=True)
    for path, method, op in operations(guarded):
        expected = [*GUARD_ERRORS, *(GUARD_BODY_ERRORS if "requestBody" in op else ())]
        for status, code in expected:
            assert code in op["responses"][str(status)]["description"], (path, method, status, code)
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != REQUEST_GUARD]
    plain = SchemaGenerator().get_schema(request=None, public=True)
    assert all("414" not in op["responses"] for _, _, op in operations(plain))


def test_the_jwt_scheme_comes_first_in_the_components_and_in_every_operation(client) -> None:
    """Issue 35: Swagger UI's Authorize dialog lists the schemes in the components' order."""
    schema = client.get("/api/schema/", {"format": "json"}).json()
    assert next(iter(schema["components"]["securitySchemes"])) == "jwtAuth"
    secured = [op["security"] for item in schema["paths"].values() for op in item.values()
               if isinstance(op, dict) and op.get("security")]
    assert secured and all(next(iter(requirements[0])) == "jwtAuth" for requirements in secured
                           if any("jwtAuth" in requirement for requirement in requirements))
