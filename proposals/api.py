"""REST for the review queue: list, detail with evidence, accept, reject (SPEC Q2).

Views parse and delegate to :mod:`proposals.selectors` and :mod:`proposals.services`. Reviewers
read and dispose; auditors read (they check that dispositions were made on the evidence shown).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from proposals import selectors, services
from proposals.models import Proposal, ProposalStatus
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import caller, roles
from skald.core.api.strict_input import StrictInput
from skald.core.roles import Role

READERS = roles(Role.REVIEWER, Role.AUDITOR)
REVIEWERS = roles(Role.REVIEWER)

DISPOSE_ERRORS = error_responses(
    _400="invalid", _403="four_eyes_required", _404="proposal_not_found", _409="proposal_already_disposed",
)


class ProposalSerializer(serializers.ModelSerializer):
    """A queue row: enough to triage without the body or the evidence."""

    case = serializers.SerializerMethodField()
    disposed_by = serializers.SerializerMethodField()
    knowledge_entry = serializers.CharField(source="knowledge_entry.slug", read_only=True, allow_null=True)

    class Meta:
        model = Proposal
        fields = ["id", "title", "status", "run", "session", "case", "source_key", "created_at", "disposed_by",
                  "disposed_at", "reason", "knowledge_entry"]

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_case(self, obj: Proposal) -> dict[str, Any] | None:
        run = obj.run
        return {"id": run.case_id, "title": run.case.title} if run is not None else None

    def get_disposed_by(self, obj: Proposal) -> str | None:
        return obj.disposed_by.get_username() if obj.disposed_by else None


class ProposalDetailSerializer(ProposalSerializer):
    """The claim, its evidence (case, ticket, run, cited session events) and what accepting does."""

    evidence = serializers.JSONField(read_only=True)
    consequence = serializers.SerializerMethodField()

    class Meta(ProposalSerializer.Meta):
        fields = [*ProposalSerializer.Meta.fields, "body", "evidence", "consequence"]

    @extend_schema_field(serializers.DictField())
    def get_consequence(self, obj: Proposal) -> dict[str, Any]:
        return selectors.proposal_consequence(proposal=obj)


class AcceptSerializer(StrictInput):
    title = serializers.CharField(required=False, max_length=200)
    body = serializers.CharField(required=False, max_length=services.BODY_MAX)


class RejectSerializer(StrictInput):
    reason = serializers.CharField(max_length=services.REASON_MAX)


def _detail(proposal_id: int) -> Response:
    return Response(ProposalDetailSerializer(selectors.proposal_get(proposal_id=proposal_id)).data)


class ProposalList(ListAPIView):
    """The queue, oldest first; ``?status=pending`` for what awaits a reviewer."""

    permission_classes = [READERS]
    serializer_class = ProposalSerializer

    def get_queryset(self) -> Any:
        return selectors.proposals_list(status=self.request.query_params.get("status") or None)

    @extend_schema(operation_id="proposal_list", summary="The review queue, oldest first (limit/offset pages)",
                   parameters=[OpenApiParameter("status", str, enum=ProposalStatus.values)],
                   responses={200: ProposalSerializer(many=True), **error_responses(_400="invalid")})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class ProposalDetail(APIView):
    permission_classes = [READERS]

    @extend_schema(operation_id="proposal_get", summary="Get a proposal with its evidence and consequence",
                   responses={200: ProposalDetailSerializer, **error_responses(_404="proposal_not_found")})
    def get(self, request: Request, proposal_id: int) -> Response:
        return _detail(proposal_id)


class ProposalAccept(APIView):
    permission_classes = [REVIEWERS]

    @extend_schema(operation_id="proposal_accept", summary="Accept a proposal (optionally edited) as knowledge",
                   request=AcceptSerializer, responses={200: ProposalDetailSerializer, **DISPOSE_ERRORS})
    def post(self, request: Request, proposal_id: int) -> Response:
        body = AcceptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.proposal_accept(reviewer=caller(request), proposal_id=proposal_id, **body.validated_data)
        return _detail(proposal_id)


class ProposalReject(APIView):
    permission_classes = [REVIEWERS]

    @extend_schema(operation_id="proposal_reject", summary="Reject a proposal with a reason",
                   request=RejectSerializer, responses={200: ProposalDetailSerializer, **DISPOSE_ERRORS})
    def post(self, request: Request, proposal_id: int) -> Response:
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.proposal_reject(reviewer=caller(request), proposal_id=proposal_id, **body.validated_data)
        return _detail(proposal_id)
