"""Request bodies hold the fields their schema names, nothing else (issue 35, the API contract).

Two post-processing hooks make the OpenAPI document say what the server does:

- every request component of the OpenAPI document says ``additionalProperties: false``
(:func:`closed_request_bodies`, a drf-spectacular post-processing hook), and every request
serializer refuses a key it does not declare with ``400 unknown_field`` (:class:`StrictInput`), so
the document and the server agree: a schema-valid body is never refused for a key the schema does
not name, and a key the server would ignore is never silently dropped (a misspelt ``reason`` is an
error, not an approval without one);
- every string a request carries (body fields, query values) says it holds no NUL
  (:func:`nul_free_strings`): the request guard refuses one anywhere with ``400 nul_character``
  (PostgreSQL text cannot hold it). A field with a pattern of its own writes a NUL-free pattern
  (:data:`NON_BLANK_TEXT`);
- a query parameter that carries a JSON object (``extensions={JSON_OBJECT: True}`` on its
  ``OpenApiParameter``) is declared with ``content: application/json`` (:func:`json_query_parameters`),
  the OpenAPI way to say a value is serialised JSON, so a client sends an object, not any string.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from skald.core.errors import SkaldError

UNKNOWN_FIELD = "unknown_field"
JSON_OBJECT = "x-skald-json-object"
NUL_FREE = "^[^\\u0000]*$"
# At least one character that is neither a space nor a NUL, and no NUL anywhere.
NON_BLANK_TEXT = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"
# The same two rules written as lookaheads, for strings with a maxLength. They read the same in Python
# and ECMAScript, but a generator that bounds each ``*`` by the string's maxLength (schemathesis) turns
# the plain form into ``[^\x00]{1,65536}``, whose automaton costs ~1 s of CPU to build per schema:
# 20 generated bodies of a 64 KiB text field took 6.5 s instead of 0.3 s. (Property names keep the
# plain form: they have no maxLength, and generators there do not honour lookaheads.)
NUL_FREE_BOUNDED = "^(?![\\s\\S]*\\u0000)"
NON_BLANK_TEXT_BOUNDED = "^(?![\\s\\S]*\\u0000)(?=\\s*\\S)"


def refuse_unknown(data: Any, known: set[str] | frozenset[str]) -> None:
    """Raise ``unknown_field`` (400) naming each key of ``data`` outside ``known``."""
    if not isinstance(data, Mapping):
        return
    unknown = sorted(str(key) for key in data if key not in known)
    if unknown:
        raise SkaldError(f"Unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}.",
                         code=UNKNOWN_FIELD, fields={key: ["unknown field"] for key in unknown})


def writable_fields(serializer: serializers.BaseSerializer) -> set[str]:
    """The keys a request body may hold for ``serializer``: its fields that are not read-only."""
    return {name for name, field in getattr(serializer, "fields", {}).items() if not field.read_only}


class StrictInput(serializers.Serializer):
    # A request serializer whose body may hold its declared fields only (nested ones included).
    # (A comment, not a docstring: drf-spectacular would show a docstring as every subclass's description.)

    def to_internal_value(self, data: Any) -> Any:
        refuse_unknown(data, writable_fields(self))
        return super().to_internal_value(data)


def closed_request_bodies(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: every ``…Request`` component (``COMPONENT_SPLIT_REQUEST``) is closed."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object":
            component.setdefault("additionalProperties", False)
    return result


def _nul_free(schema: Any) -> None:
    """Give every plain string in ``schema`` (recursively) the NUL-free pattern."""
    if isinstance(schema, list):
        for item in schema:
            _nul_free(item)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "string" and not ({"pattern", "enum", "format"} & set(schema)):
        schema["pattern"] = NUL_FREE_BOUNDED if "maxLength" in schema else NUL_FREE
    for key in ("properties", "patternProperties"):
        for child in schema.get(key, {}).values():
            _nul_free(child)
    for key in ("items", "additionalProperties", "allOf", "anyOf", "oneOf"):
        _nul_free(schema.get(key))


def nul_free_strings(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: request strings (``…Request`` components, query parameters) hold no NUL."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request"):
            _nul_free(component)
    for item in result.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else ():
                if parameter.get("in") == "query":
                    _nul_free(parameter.get("schema"))
    return result


def json_query_parameters(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: a query parameter marked :data:`JSON_OBJECT` is ``content: application/json``."""
    text = {"type": "string", "pattern": NUL_FREE}  # what the document promises; the server takes any JSON value
    for item in result.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else ():
                if parameter.pop(JSON_OBJECT, False):
                    parameter.pop("schema", None)
                    parameter["content"] = {"application/json": {"schema": {
                        "type": "object", "propertyNames": {"pattern": NUL_FREE}, "additionalProperties": text}}}
    return result
