"""``GET /api/runs/{id}/replay-verify``: operators and auditors replay-verify a run. Delegates."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import roles
from skald.core.roles import Role
from skald.crosscheck import replay_verify_run

ReplayVerifySerializer = inline_serializer(
    name="RunReplayVerify",
    fields={
        "ok": serializers.BooleanField(),
        "exchanges": serializers.IntegerField(help_text="Exchanges of the run's session, settled or not."),
        "events": serializers.IntegerField(help_text="Session events checked."),
        "mismatches": serializers.ListField(
            child=serializers.DictField(),
            help_text="One object per finding: `exchange`, `number`, `field`, then the stored, "
            "recomputed or audited values (`seq` / `audit_seq` when an event or audit row is named).",
        ),
    },
)


class ReplayVerifyView(APIView):
    permission_classes = [roles(Role.OPERATOR, Role.AUDITOR)]

    @extend_schema(
        operation_id="run_replay_verify",
        summary="Replay-verify a run from stored rows",
        description=(
            "Recomputes every settled exchange's receipt, the event digests the audit rows recorded, "
            "the session's seq contiguity and the projection of its history — from stored rows only; "
            "no model is called. A mismatch is still a 200 with `ok: false`."
        ),
        responses={200: ReplayVerifySerializer, **error_responses(_404="run_not_found")},
    )
    def get(self, request: Request, run_id: int) -> Response:
        return Response(replay_verify_run(run_id=run_id).as_dict())
