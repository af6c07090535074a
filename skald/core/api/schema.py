"""The OpenAPI conventions every operation shares, applied in one place.

- Tags group operations by resource, from the route (``/api/sessions/…`` → ``sessions``); a view
  may still name its tags with ``extend_schema(tags=…)``.
- An operation that takes a JSON body also answers ``400 parse_error`` (the body is not JSON) and
  ``415 unsupported_media_type`` (the body is not ``application/json``) and ``400 unknown_field``
  (a key its closed request schema does not name, :mod:`skald.core.api.strict_input`); an operation with path
  parameters answers ``404 not_found`` when a malformed id matches no route. These are added here
  so no view can forget them.
- When the request guard is installed (``REQUEST_GUARD`` in ``MIDDLEWARE``), the codes it answers
  before any view runs are documented on every operation it can answer them for.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from skald.core.api.errors_schema import add_code, error_response
from skald.core.api.strict_input import NON_BLANK_TEXT, NON_BLANK_TEXT_BOUNDED

# Route prefix → tag. Longest prefix first; the GDL launch and the human seams act on runs.
ROUTE_TAGS: tuple[tuple[str, str], ...] = (
    ("/api/auth/", "auth"),
    ("/api/sessions/", "sessions"),
    ("/api/cases/", "cases"),
    ("/api/runs/", "runs"),
    ("/workflow/cases/", "runs"),
    ("/workflow/runs/", "runs"),
    ("/api/approval/", "approvals"),
    ("/api/approvals/", "approvals"),
    ("/api/tools/", "approvals"),
    ("/api/proposals/", "proposals"),
    ("/api/audit/", "audit"),
    ("/api/inspect", "inspect"),
    ("/api/policy/", "policy"),
    ("/api/mcp/", "mcp"),
    ("/api/notifications/", "notifications"),
    ("/api/{source}/tasks", "tasks"),
)
TAGS = frozenset(tag for _, tag in ROUTE_TAGS)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# (status, code) every operation that takes a JSON body can answer before its view decides anything.
BODY_ERRORS: tuple[tuple[int, str], ...] = ((400, "parse_error"), (400, "unknown_field"),
                                            (415, "unsupported_media_type"))
# (status, code) every operation with path parameters can answer: a malformed id matches no route.
PATH_ERRORS: tuple[tuple[int, str], ...] = ((404, "not_found"),)
# The request guard (malformed input → JSON 4xx before any view) and what it answers: on every
# operation (path and query checks), and on operations with a body (size, JSON checks).
REQUEST_GUARD = "skald.core.api.middleware.RequestGuardMiddleware"
GUARD_ERRORS: tuple[tuple[int, str], ...] = ((400, "nul_character"), (400, "invalid_unicode"), (414, "uri_too_long"))
GUARD_BODY_ERRORS: tuple[tuple[int, str], ...] = (
    (400, "invalid_json"), (400, "json_too_deep"), (400, "out_of_range"), (400, "bad_request"),
    (413, "request_too_large"),
)
MAX_ID = 2**63 - 1


def route_tag(path: str) -> str | None:
    """The resource tag of an API path, or ``None`` for a path outside the map."""
    return next((tag for prefix, tag in ROUTE_TAGS if path.startswith(prefix)), None)


class SkaldAutoSchema(AutoSchema):
    """drf-spectacular's AutoSchema with Skald's tags, id ranges and the errors every route shares."""

    def get_tags(self) -> list[str]:
        tag = route_tag(self.path)
        return [tag] if tag is not None else super().get_tags()

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        # ``extend_schema(responses=…)`` replaces get_response_serializers, so the body errors are
        # merged here, where every operation's responses pass.
        bodies: dict[str, Any] = super()._get_response_bodies(direction)
        if direction != "response":
            return bodies
        body, guarded = self._takes_body(), REQUEST_GUARD in settings.MIDDLEWARE
        added = [*(BODY_ERRORS if body else ()), *(PATH_ERRORS if "{" in self.path else ()),
                 *(GUARD_ERRORS if guarded else ()), *(GUARD_BODY_ERRORS if guarded and body else ())]
        for status_code, code in added:
            listed = bodies.get(str(status_code))
            if listed is None:
                bodies[str(status_code)] = self._get_response_for_code(
                    error_response(status_code, (code,)), str(status_code), direction=direction)
            else:
                add_code(listed, status_code, code)
        return dict(sorted(bodies.items()))

    def _get_request_for_media_type(self, serializer: Any, direction: str = "request") -> tuple[Any, bool]:
        # A body that is one of several shapes (a PolymorphicProxySerializer: oneOf) is still required:
        # every shape has required fields, which drf-spectacular only looks for on a plain component.
        schema, required = super()._get_request_for_media_type(serializer, direction)
        return schema, required or (schema is not None and isinstance(serializer, PolymorphicProxySerializer))

    def _map_serializer_field(self, field: Any, direction: str, bypass_extensions: bool = False) -> dict[str, Any]:
        # A request string that DRF trims and refuses when blank must hold a non-space character:
        # say so, so "   " is not a schema-valid value the server refuses.
        mapped: dict[str, Any] = super()._map_serializer_field(field, direction, bypass_extensions)
        if (direction == "request" and isinstance(field, serializers.CharField) and field.trim_whitespace
                and not field.allow_blank and mapped.get("type") == "string" and "pattern" not in mapped
                and "enum" not in mapped and "format" not in mapped
                and not any(isinstance(v, RegexValidator) for v in field.validators)):
            mapped["pattern"] = NON_BLANK_TEXT_BOUNDED if "maxLength" in mapped else NON_BLANK_TEXT
        return mapped

    def _resolve_path_parameters(self, variables: list[str]) -> list[dict[str, Any]]:
        # Ids are 64-bit row keys and the route converter takes digits only: say so, so a client
        # (or a fuzzer) knows the range a well-formed id lives in.
        parameters: list[dict[str, Any]] = super()._resolve_path_parameters(variables)
        for parameter in parameters:
            if parameter["schema"].get("type") == "integer":
                parameter["schema"].update(format="int64", minimum=0, maximum=MAX_ID)
        return parameters

    def _takes_body(self) -> bool:
        return self.method in BODY_METHODS and self.get_request_serializer() is not None


# Swagger UI's Authorize dialog lists the schemes in the order of the components; a token pasted
# into the first one (the session cookie's, alphabetically) failed (issue 35). The bearer token a
# caller obtains from /api/auth/token/ comes first, everywhere.
SECURITY_ORDER = ("jwtAuth", "providerBearer", "cookieAuth")


def _security_rank(requirement: dict[str, Any]) -> int:
    names = list(requirement)
    return min((SECURITY_ORDER.index(name) for name in names if name in SECURITY_ORDER), default=len(SECURITY_ORDER))


def jwt_first(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: the JWT scheme first among the components and in each operation's list."""
    schemes = result.get("components", {}).get("securitySchemes")
    if schemes:
        result["components"]["securitySchemes"] = dict(sorted(
            schemes.items(), key=lambda item: _security_rank({item[0]: []})))
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and operation.get("security"):
                operation["security"] = sorted(operation["security"], key=_security_rank)
    return result
