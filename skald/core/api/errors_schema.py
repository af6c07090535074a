"""OpenAPI helpers: each operation lists the error codes it can answer, per status."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, inline_serializer
from rest_framework import serializers

ErrorSerializer = inline_serializer(
    name="Error",
    fields={
        "code": serializers.CharField(help_text="Stable, machine-readable; listed per status on each operation."),
        "message": serializers.CharField(help_text="For people; may change."),
        "extra": serializers.DictField(help_text="Details, e.g. `fields` for a validation error."),
    },
)

# Every operation may answer these: the API admits authenticated callers with a role only.
_STANDARD: dict[int, tuple[str, ...]] = {
    401: ("not_authenticated", "authentication_failed", "token_not_valid"),
    403: ("permission_denied",),
}
_PREFIX = "Error codes: "


def _examples(status_code: int, codes: Iterable[str]) -> list[Any]:
    return [OpenApiExample(code, value={"code": code, "message": "…", "extra": {}}, status_codes=[status_code])
            for code in codes]


def error_response(status_code: int, codes: tuple[str, ...]) -> OpenApiResponse:
    """One status's error response: the Error body, described and exemplified by its codes."""
    return OpenApiResponse(response=ErrorSerializer, description=_PREFIX + ", ".join(codes),
                           examples=_examples(status_code, codes))


def add_code(rendered: dict[str, Any], status_code: int, code: str) -> None:
    """Add ``code`` to an already rendered error response (its description and examples)."""
    description = str(rendered.get("description", ""))
    if code in description.removeprefix(_PREFIX).split(", "):
        return
    rendered["description"] = f"{description}, {code}" if description.startswith(_PREFIX) else _PREFIX + code
    media = rendered.setdefault("content", {}).setdefault("application/json", {})
    name = "".join(part.title() for part in code.split("_"))  # as drf-spectacular names examples
    media.setdefault("examples", {})[name] = {"value": {"code": code, "message": "…", "extra": {}},
                                              "summary": code}


def error_responses(*, authenticated: bool = True, **by_status: tuple[str, ...] | str) -> dict[int, OpenApiResponse]:
    """``error_responses(_404="case_not_found", _409=("a", "b"))`` → one response per status naming its codes.

    401 and 403 are included unless ``authenticated=False`` (the public token endpoints).
    """
    merged: dict[int, tuple[str, ...]] = dict(_STANDARD) if authenticated else {}
    for key, codes in by_status.items():
        status_code = int(key.lstrip("_"))
        merged[status_code] = merged.get(status_code, ()) + ((codes,) if isinstance(codes, str) else codes)
    return {status_code: error_response(status_code, codes) for status_code, codes in sorted(merged.items())}
