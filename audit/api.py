"""``GET /api/audit/verify``: auditors verify the chain over HTTP. Parses nothing, delegates."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.chain import VerifyReport
from audit.services import chain_head_export_latest, chain_verify
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import roles
from skald.core.roles import Role

_Head = inline_serializer(
    name="AuditChainTip",
    fields={"seq": serializers.IntegerField(), "hash": serializers.CharField()},
)
_RecordedHead = inline_serializer(
    name="AuditRecordedHead",
    fields={
        "seq": serializers.IntegerField(),
        "hash": serializers.CharField(),
        "recorded_at": serializers.CharField(),
        "signature": serializers.CharField(allow_null=True),
    },
    allow_null=True,
)
VerifySerializer = inline_serializer(
    name="AuditVerify",
    fields={
        "ok": serializers.BooleanField(),
        "rows": serializers.IntegerField(help_text="Rows examined (up to the first bad one)."),
        "first_bad_seq": serializers.IntegerField(allow_null=True),
        "reason": serializers.CharField(allow_null=True),
        "head": _Head,
        "recorded_head": _RecordedHead,
    },
)


def verify_body(report: VerifyReport) -> dict[str, Any]:
    """The JSON body for a report; ``head`` is the tip of the rows that verified."""
    return {
        "ok": report.ok,
        "rows": report.rows,
        "first_bad_seq": report.first_bad_seq,
        "reason": report.reason,
        "head": {"seq": report.tip_seq, "hash": report.tip_hash},
        "recorded_head": chain_head_export_latest(),
    }


class ChainVerifyView(APIView):
    permission_classes = [roles(Role.AUDITOR)]

    @extend_schema(
        operation_id="audit_verify",
        summary="Verify the audit hash chain",
        description=(
            "Recomputes every row's hash and link and checks the recorded heads. A broken chain is "
            "still a 200 with `ok: false`, the first bad seq and the reason."
        ),
        responses={200: VerifySerializer, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        return Response(verify_body(chain_verify()))
