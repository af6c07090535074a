"""Argument validation: the codec and the shape (JSON schema), never authorisation (SPEC L9)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from loop.digest import canonical
from loop.errors import ToolError


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Draft202012Validator:
    import json

    schema = json.loads(schema_json)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def validate_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any] | None) -> None:
    """Raise a model-visible :class:`ToolError` when ``arguments`` do not fit ``schema``."""
    if arguments is None:
        raise ToolError("arguments are not a JSON object", code="invalid_arguments")
    try:
        validator = _validator(canonical(dict(schema)))
    except SchemaError:
        raise ToolError("the tool's schema is invalid", code="tool_schema_invalid") from None
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.path) or "(root)"
        raise ToolError(f"invalid arguments at {where}: {first.message}"[:400], code="invalid_arguments")
