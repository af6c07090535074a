"""What every ``/api/policy/…`` operation shares in the OpenAPI schema: the ETag and If-Match headers
and its errors (403 ``admin_required``; 412 and 428 on a conditional write)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from skald.core.api.conditional import IF_MATCH_DESCRIPTION
from skald.core.api.errors_schema import error_responses

ETAG_HEADER = OpenApiParameter("ETag", OpenApiTypes.STR, location=OpenApiParameter.HEADER, response=[200, 201],
                               description="The row's version: send it back in If-Match to change or delete it.")
IF_MATCH = OpenApiParameter("If-Match", OpenApiTypes.STR, location=OpenApiParameter.HEADER, required=True,
                            description=IF_MATCH_DESCRIPTION)


def admin_errors(*, conditional: bool = False, **by_status: tuple[str, ...] | str) -> dict[int, Any]:
    """The operation's errors, with 403 ``admin_required`` and (``conditional``) 412 and 428."""
    if conditional:
        by_status |= {"_412": "precondition_failed", "_428": "precondition_required"}
    by_status["_403"] = "admin_required"
    return error_responses(authenticated=True, **by_status)  # type: ignore[arg-type]  # keys are _<status>
