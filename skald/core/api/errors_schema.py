"""OpenAPI helpers: each operation lists the error codes it can answer."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, inline_serializer
from rest_framework import serializers

ErrorSerializer = inline_serializer(
    name="Error",
    fields={
        "code": serializers.CharField(),
        "message": serializers.CharField(),
        "extra": serializers.DictField(),
    },
)

_STANDARD: dict[int, tuple[str, ...]] = {
    401: ("not_authenticated", "authentication_failed", "token_not_valid"),
    403: ("permission_denied",),
}


def error_responses(**by_status: tuple[str, ...] | str) -> dict[int, OpenApiResponse]:
    """``error_responses(**{"404": ("not_found",)})`` → responses naming every code per status."""
    merged: dict[int, tuple[str, ...]] = dict(_STANDARD)
    for key, codes in by_status.items():
        status_code = int(key.lstrip("_"))
        merged[status_code] = merged.get(status_code, ()) + ((codes,) if isinstance(codes, str) else codes)
    responses: dict[int, OpenApiResponse] = {}
    for status_code, codes in sorted(merged.items()):
        examples: list[Any] = [
            OpenApiExample(code, value={"code": code, "message": "…", "extra": {}}, status_codes=[status_code])
            for code in codes
        ]
        responses[status_code] = OpenApiResponse(
            response=ErrorSerializer, description="Error codes: " + ", ".join(codes), examples=examples
        )
    return responses
