"""REST for cases (operators write, others read) and runs."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.actors import Actor
from skald.api.sessions import EventPageQuery, EventPageSerializer, events_page
from skald.cases import runs as run_services
from skald.cases import selectors
from skald.cases.services import case_create, case_update
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import caller, read_or_write, roles
from skald.core.api.schema import MAX_ID
from skald.core.api.strict_input import StrictInput
from skald.core.roles import Role
from skald.models import Case, CaseLog, Run, RunStatus

ANY_ROLE = roles(Role.OPERATOR, Role.APPROVER, Role.REVIEWER, Role.AUDITOR, Role.WORKFLOW)
OPERATORS_WRITE = read_or_write(read=ANY_ROLE, write=roles(Role.OPERATOR))


class CaseLogSerializer(serializers.ModelSerializer):
    class Meta:
        model = CaseLog
        fields = ["id", "name", "content"]


class CaseSerializer(serializers.ModelSerializer):
    logs = CaseLogSerializer(many=True, read_only=True)

    class Meta:
        model = Case
        fields = ["id", "title", "description", "status", "created_at", "logs"]


class LogInput(StrictInput):
    name = serializers.CharField(max_length=120)
    content = serializers.CharField(max_length=1024 * 1024, trim_whitespace=False)


class CaseInput(StrictInput):
    title = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    logs = LogInput(many=True, required=False, default=list)


class CaseUpdateInput(StrictInput):
    title = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    status = serializers.ChoiceField(choices=["open", "closed"], required=False)


class RunSerializer(serializers.ModelSerializer):
    launched_by = serializers.CharField(source="launched_by.username")

    class Meta:
        model = Run
        fields = ["id", "case", "session", "ticket", "launched_by", "status", "outcome", "receipt",
                  "handoff_question", "closed_by_human", "created_at", "updated_at", "finished_at"]


class CaseListCreate(APIView):
    permission_classes = [OPERATORS_WRITE]

    @extend_schema(operation_id="case_list", summary="List cases (newest 200)",
                   responses={200: CaseSerializer(many=True), **error_responses()})
    def get(self, request: Request) -> Response:
        return Response(CaseSerializer(selectors.cases_list()[:200], many=True).data)

    @extend_schema(operation_id="case_create", summary="Open a case with its logs",
                   request=CaseInput, responses={201: CaseSerializer, **error_responses(_400="invalid")})
    def post(self, request: Request) -> Response:
        body = CaseInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        case = case_create(actor=Actor.user(caller(request)), title=data["title"], description=data["description"],
                           logs=[(log["name"], log["content"]) for log in data["logs"]],
                           created_by_id=request.user.pk)
        return Response(CaseSerializer(selectors.case_get(case_id=case.pk)).data, status=status.HTTP_201_CREATED)


class CaseDetail(APIView):
    permission_classes = [OPERATORS_WRITE]

    @extend_schema(operation_id="case_get", summary="Get a case with its logs",
                   responses={200: CaseSerializer, **error_responses(_404="case_not_found")})
    def get(self, request: Request, case_id: int) -> Response:
        return Response(CaseSerializer(selectors.case_get(case_id=case_id)).data)

    @extend_schema(operation_id="case_update", summary="Change a case's title, description or status",
                   request=CaseUpdateInput,
                   responses={200: CaseSerializer, **error_responses(_400="invalid", _404="case_not_found")})
    def patch(self, request: Request, case_id: int) -> Response:
        case = selectors.case_get(case_id=case_id)
        body = CaseUpdateInput(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        case_update(actor=Actor.user(caller(request)), case=case, changes=dict(body.validated_data))
        return Response(CaseSerializer(selectors.case_get(case_id=case_id)).data)


class RunListQuery(serializers.Serializer):
    status = serializers.ChoiceField(choices=RunStatus.values, required=False, help_text="Only runs in this status.")
    case = serializers.IntegerField(required=False, min_value=0, max_value=MAX_ID, help_text="Only runs of this case.")


class RunList(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="run_list", summary="List the runs you may see (newest 200)",
                   parameters=[RunListQuery],
                   responses={200: RunSerializer(many=True), **error_responses(_400="invalid")})
    def get(self, request: Request) -> Response:
        query = RunListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        runs = selectors.runs_visible_to(caller(request))
        if "status" in query.validated_data:
            runs = runs.filter(status=query.validated_data["status"])
        if "case" in query.validated_data:
            runs = runs.filter(case_id=query.validated_data["case"])
        return Response(RunSerializer(runs.order_by("-id")[:200], many=True).data)


class RunDetail(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="run_get", summary="Get a run: status, outcome, receipt",
                   responses={200: RunSerializer, **error_responses(_404="run_not_found")})
    def get(self, request: Request, run_id: int) -> Response:
        return Response(RunSerializer(selectors.run_get(user=caller(request), run_id=run_id)).data)


class RunEvents(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="run_events_list", summary="Page through a run's session events",
                   parameters=[EventPageQuery],
                   responses={200: EventPageSerializer, **error_responses(_400="invalid", _404="run_not_found")})
    def get(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(user=caller(request), run_id=run_id)
        return Response(events_page(request, run.session))


class RunStop(APIView):
    permission_classes = [roles(Role.OPERATOR)]

    @extend_schema(operation_id="run_stop", summary="Stop a run (its approvals are cancelled)",
                   request=None, responses={202: RunSerializer, **error_responses(_404="run_not_found")})
    def post(self, request: Request, run_id: int) -> Response:
        run = selectors.run_get(user=caller(request), run_id=run_id)
        run = run_services.run_stop(user=caller(request), run=run)
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)
