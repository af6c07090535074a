"""REST for durable approvals: list, resolve by request id, resolve by tool-call id, resolve a
batch. Views parse and delegate to ``approvals.pending.services``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.models import ApprovalStatus, PendingApproval
from approvals.pending import selectors as selectors_pending
from approvals.pending.services import REASON_PATTERN, pending_approval_resolve
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import caller, roles
from skald.core.api.schema import MAX_ID
from skald.core.api.strict_input import StrictInput
from skald.core.roles import Role

RESOLVE_ERRORS = error_responses(
    _400=("invalid", "reason_required", "provenance_acknowledgement_required"), _403="four_eyes_required",
    _404="approval_not_found",
    _409=("approval_already_resolved", "approval_arguments_changed"), _410="approval_expired",
)


class SuspectSerializer(serializers.Serializer):
    """A suspected instruction in an untrusted result (``control:injection_suspect``)."""

    seq = serializers.IntegerField(help_text="The control:injection_suspect event's seq.")
    kind = serializers.CharField(help_text="ignore_instructions | addressed_to_assistant | fake_markup | "
                                           "tool_name | hidden_unicode | encoded")
    start = serializers.IntegerField(help_text="Span start in the result's content (characters).")
    end = serializers.IntegerField()
    score = serializers.FloatField()
    excerpt = serializers.CharField()


class ProvenanceSourceSerializer(serializers.Serializer):
    """An untrusted result in the call's frame."""

    seq = serializers.IntegerField(help_text="The result's event seq in the session.")
    key = serializers.CharField(help_text="The call key of the result.")
    tool = serializers.CharField()
    server = serializers.CharField(allow_null=True, help_text="The MCP server, for an MCP tool.")
    kind = serializers.CharField(help_text="tool_result | subagent_result | compaction")
    at = serializers.DateTimeField(required=False, help_text="When the result was recorded.")
    suspects = SuspectSerializer(many=True)


class ProvenanceArgumentSerializer(serializers.Serializer):
    """An argument value (or an identifier inside one) that occurs in an untrusted result."""

    path = serializers.CharField(help_text="The argument's dotted path.")
    value = serializers.CharField()
    seq = serializers.IntegerField(help_text="The untrusted result it occurs in.")
    tool = serializers.CharField()
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    how = serializers.ChoiceField(choices=["exact", "normalised", "separators"])
    suspect = serializers.BooleanField(help_text="That result has a suspected injection.")


class ProvenanceSerializer(serializers.Serializer):
    """Why the call follows untrusted content (docs/provenance.md); null when its frame was not tainted."""

    tainted = serializers.BooleanField()
    seq = serializers.IntegerField(required=False, help_text="The control:provenance event's seq.")
    sources = ProvenanceSourceSerializer(many=True)
    arguments = ProvenanceArgumentSerializer(many=True)
    read_only = serializers.BooleanField()  # type: ignore[assignment]  # a field named like Field.read_only
    injection_suspected = serializers.BooleanField()
    argument_from_untrusted = serializers.BooleanField()
    argument_from_suspect = serializers.BooleanField()
    acknowledge_required = serializers.BooleanField(
        help_text="Approving needs provenance_acknowledged: an argument came from a result with a suspected injection.")


class ApprovalSerializer(serializers.ModelSerializer):
    tool_call_id = serializers.IntegerField()
    session = serializers.IntegerField(source="session_id")
    rule = serializers.JSONField(source="rule_snapshot")
    requested_by = serializers.SerializerMethodField()
    resolved_by = serializers.SerializerMethodField()

    class Meta:
        model = PendingApproval
        fields = ["request_id", "tool_call_id", "session", "batch", "tool", "args", "preview", "rule",
                  "requested_by", "expires_at", "status", "resolved_by", "resolved_at", "reason", "created_at",
                  "provenance"]

    provenance = serializers.SerializerMethodField()

    @extend_schema_field(ProvenanceSerializer(allow_null=True))
    def get_provenance(self, obj: PendingApproval) -> dict[str, Any] | None:
        return dict(obj.provenance) if obj.provenance else None

    def get_requested_by(self, obj: PendingApproval) -> str | None:
        return obj.requested_by.get_username() if obj.requested_by else None

    def get_resolved_by(self, obj: PendingApproval) -> str | None:
        return obj.resolved_by.get_username() if obj.resolved_by else None


class BatchResolutionSerializer(serializers.Serializer):
    """What a resolve answers: the continuation is scheduled; the approvals as they now stand."""

    continuation = serializers.ChoiceField(choices=["scheduled"])
    approvals = ApprovalSerializer(many=True)


class ResolutionSerializer(ApprovalSerializer):
    """A single resolve: the approval's own fields, plus the batch-shaped ``continuation`` and ``approvals``."""

    continuation = serializers.ChoiceField(choices=["scheduled"])
    approvals = ApprovalSerializer(many=True)

    class Meta(ApprovalSerializer.Meta):
        fields = [*ApprovalSerializer.Meta.fields, "continuation", "approvals"]


_ACKNOWLEDGED = ("The approver saw the call's provenance; required to approve a call whose provenance says "
                 "acknowledge_required.")


class ResolveSerializer(StrictInput):
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
    provenance_acknowledged = serializers.BooleanField(required=False, default=False, help_text=_ACKNOWLEDGED)


class ApproveInput(StrictInput):
    decision = serializers.ChoiceField(choices=["approve"])
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
    provenance_acknowledged = serializers.BooleanField(required=False, default=False, help_text=_ACKNOWLEDGED)


class RejectInput(StrictInput):
    decision = serializers.ChoiceField(choices=["reject"])
    reason = serializers.RegexField(REASON_PATTERN, max_length=2000,
                                    help_text="Why: the requester reads it (required, not only spaces).")


# What the document says a resolve takes: an approval (a reason optional) or a rejection with a
# reason (``reason_required`` otherwise). The server reads both with ResolveSerializer; the service
# refuses a reason-less rejection, whoever calls it.
RESOLVE_BODY = PolymorphicProxySerializer(component_name="Resolve", serializers={"approve": ApproveInput,
                                                                                 "reject": RejectInput},
                                          resource_type_field_name="decision")


def _accepted(approvals: list[PendingApproval]) -> Response:
    body: dict[str, Any] = {"continuation": "scheduled",
                            "approvals": ApprovalSerializer(approvals, many=True).data}
    if len(approvals) == 1:
        body.update(ApprovalSerializer(approvals[0]).data)
    return Response(body, status=status.HTTP_202_ACCEPTED)


class ApprovalListQuery(serializers.Serializer):
    status = serializers.ChoiceField(choices=ApprovalStatus.values, required=False)
    session = serializers.IntegerField(required=False, min_value=0, max_value=MAX_ID,
                                       help_text="Only this session's approvals.")


class ApprovalList(APIView):
    permission_classes = [roles(Role.APPROVER, Role.OPERATOR)]

    @extend_schema(operation_id="approval_list", summary="List approvals (newest 200), e.g. the pending queue",
                   parameters=[ApprovalListQuery],
                   responses={200: ApprovalSerializer(many=True), **error_responses(_400="invalid")})
    def get(self, request: Request) -> Response:
        query = ApprovalListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        items = selectors_pending.approvals_list(status=query.validated_data.get("status"),
                                                 session_id=query.validated_data.get("session"))[:200]
        return Response(ApprovalSerializer(items, many=True).data)


def _resolve_one(request: Request, **lookup: Any) -> Response:
    body = ResolveSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return _accepted([pending_approval_resolve(resolver=caller(request), **lookup, **body.validated_data)])


class ApprovalResolve(APIView):
    permission_classes = [roles(Role.APPROVER)]

    @extend_schema(operation_id="approval_resolve", summary="Approve or reject a pending call by request id",
                   request=RESOLVE_BODY, responses={202: ResolutionSerializer, **RESOLVE_ERRORS})
    def post(self, request: Request, request_id: str) -> Response:
        return _resolve_one(request, request_id=request_id)


class ToolCallResolve(APIView):
    """Resolve by the durable tool-call id; the owning session comes from the call's own row."""

    permission_classes = [roles(Role.APPROVER)]

    @extend_schema(operation_id="approval_resolve_by_tool_call",
                   summary="Approve or reject a pending call by its tool-call id",
                   request=RESOLVE_BODY, responses={202: ResolutionSerializer, **RESOLVE_ERRORS})
    def post(self, request: Request, tool_call_id: int) -> Response:
        return _resolve_one(request, tool_call_id=tool_call_id)


class BatchResolve(APIView):
    """Answer every still-pending call of a batch at once (calls parked together in one round)."""

    permission_classes = [roles(Role.APPROVER)]

    @extend_schema(operation_id="approval_batch_resolve", summary="Approve or reject every pending call of a batch",
                   request=RESOLVE_BODY, responses={202: BatchResolutionSerializer, **RESOLVE_ERRORS})
    def post(self, request: Request, session_id: int, batch: str) -> Response:
        body = ResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        pending = list(selectors_pending.batch_members(session_id=session_id, batch=batch)
                       .filter(status=ApprovalStatus.PENDING).values_list("request_id", flat=True))
        if not pending:
            from skald.core.errors import NotFound

            raise NotFound("No pending approvals in that batch.", code="approval_not_found")
        resolved = [pending_approval_resolve(resolver=caller(request), request_id=rid, **body.validated_data)
                    for rid in pending]
        return _accepted(resolved)
