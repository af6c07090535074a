"""``GET /api/audit/verify``: auditors verify the chain over HTTP. Parses nothing, delegates."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.chain import VerifyReport
from audit.heads import CheckedHead, chain_verify_with_head
from audit.services import chain_head_export_latest
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
        "checked_head": inline_serializer(
            name="AuditCheckedHead",
            fields={"seq": serializers.IntegerField(), "hash": serializers.CharField(),
                    "recorded_at": serializers.CharField(), "signed": serializers.BooleanField(),
                    "source": serializers.CharField(help_text="database, or the exported head file"),
                    "age_seconds": serializers.IntegerField(allow_null=True)},
            allow_null=True,
            help_text="The newest head the check ran against; null: none, so a cut-off tail would go unseen.",
        ),
    },
)


def verify_body(report: VerifyReport, checked: CheckedHead | None = None) -> dict[str, Any]:
    """The JSON body for a report; ``head`` is the tip of the rows that verified, ``checked_head``
    the newest recorded head the check ran against."""
    return {
        "ok": report.ok,
        "rows": report.rows,
        "first_bad_seq": report.first_bad_seq,
        "reason": report.reason,
        "head": {"seq": report.tip_seq, "hash": report.tip_hash},
        "recorded_head": chain_head_export_latest(),
        "checked_head": None if checked is None else {
            "seq": checked.seq, "hash": checked.hash, "recorded_at": checked.recorded_at, "signed": checked.signed,
            "source": "database" if checked.source == "database" else "file",
            "age_seconds": None if checked.age is None else int(checked.age.total_seconds()),
        },
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
        return Response(verify_body(*chain_verify_with_head()))
