"""Workflow views. Authorisation comes first — before any body parsing, secret, DNS or provider
work — then the body is checked, then the service runs. The GDL launch waits at most 25 s in total
for the episode; the client going away ends the wait, never the run (it lives on a worker)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from skald.api.cases import RunSerializer
from skald.cases import runs as run_services
from skald.cases.tickets import MAX_TICKET_BYTES, parse_ticket
from skald.core.api.errors_schema import error_responses
from skald.core.api.exceptions import error_body
from skald.core.api.permissions import caller, roles
from skald.core.api.strict_input import StrictInput
from skald.core.errors import SkaldError
from skald.core.ids import new_token
from skald.core.roles import AGENT_PRINCIPAL, Role, has_role
from skald.models import Run, RunStatus

WAIT_POLL_SECONDS = 0.1
SETTLED_FOR_WAIT = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.AWAITING_HUMAN,
                    RunStatus.HANDOFF)


@dataclass(frozen=True)
class Launched:
    """What the launch API hands the waiting view: the run and whether this request admitted it."""

    run_id: int
    created: bool


@dataclass(frozen=True)
class GdlAnswer:
    """The final answer to a launch, as values: HTTP status, JSON body and the ``Location`` if any."""

    status: int
    body: Any
    location: str | None = None


class WorkflowCaller(BasePermission):
    """The workflow role plus the domain write permission; agents never launch (SPEC W3)."""

    message = "The workflow role and the case write permission are required."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated) or user.get_username() == AGENT_PRINCIPAL:
            return False
        return has_role(user, Role.WORKFLOW) and user.has_perm("skald.write_case")


class GdlLaunchInput(StrictInput):
    ticket = serializers.CharField(max_length=MAX_TICKET_BYTES)


class GdlLaunchAPI(APIView):
    """``POST /workflow/cases/{id}/gdl``: launch one episode on a fresh troubleshoot run."""

    permission_classes = [WorkflowCaller]

    @extend_schema(
        operation_id="run_gdl_launch",
        summary="Launch a GDL run on a case; waits up to 25 s for it to end or park",
        description="200: the run ended (completed or cancelled). 202: still running or waiting for a human; "
                    "`Location` names the run. A failed launch answers 503 `gdl_provider_failed` (the provider "
                    "failed) or 500 `gdl_run_failed`; the same `Idempotency-Key` later answers 409.",
        request=GdlLaunchInput,
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
                                     description="The launch key (at most 100 characters): a retry returns "
                                                 "the same run.")],
        responses={200: RunSerializer, 202: RunSerializer, **error_responses(
            _400=("gdl_request_migrated", "gdl_ticket_invalid", "invalid", "credential_tripwire"),
            _404="case_not_found", _409="gdl_run_terminal", _500="gdl_run_failed", _503="gdl_provider_failed")},
    )
    def post(self, request: Request, case_id: int) -> Response:
        ticket = parse_ticket(request.data)
        key = request.headers.get("Idempotency-Key") or new_token()
        if len(key) > 100:
            raise SkaldError("Idempotency-Key must be at most 100 characters.", code="invalid")
        run, created = run_services.run_launch(user=caller(request), case_id=case_id, ticket=ticket, launch_key=key)
        # The data is a value for gdl_launch, which answers in its place; it is never rendered.
        return Response(Launched(run_id=run.pk, created=created))


_launch_api = GdlLaunchAPI.as_view()


def _render(response: HttpResponse) -> HttpResponse:
    render = getattr(response, "render", None)
    if render is not None:
        render()
    return response


def gdl_answer(*, run: dict[str, Any], status: str, outcome: str | None, created: bool) -> GdlAnswer:
    """The answer to a launch whose wait is over (pure): ``run`` is the serialised run."""
    if not created and status in (RunStatus.FAILED, RunStatus.CANCELED):
        return GdlAnswer(409, error_body("gdl_run_terminal", f"This launch already ended ({status}); nothing is "
                                         "replayed.", {"run": run}))
    if status == RunStatus.FAILED:
        code = "gdl_provider_failed" if outcome == "provider_failed" else "gdl_run_failed"
        return GdlAnswer(503 if code == "gdl_provider_failed" else 500,
                         error_body(code, "The run failed after admission; it is durably terminal.", {"run": run}))
    if status in (RunStatus.COMPLETED, RunStatus.CANCELED):
        return GdlAnswer(200, run)
    return GdlAnswer(202, run, location=f"/api/runs/{run['id']}/")


def _final(launched: Launched) -> HttpResponse:
    run = Run.objects.select_related("launched_by").get(pk=launched.run_id)
    answer = gdl_answer(run=RunSerializer(run).data, status=run.status, outcome=run.outcome,
                        created=launched.created)
    response = _json(answer.body, answer.status)
    if answer.location is not None:
        response["Location"] = answer.location
    return response


def _json(data: Any, status: int) -> HttpResponse:
    return JsonResponse(data, status=status, safe=False)


def _run_status(run_id: int) -> str:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).get()


@csrf_exempt
async def gdl_launch(request: HttpRequest, case_id: int) -> HttpResponse:
    """Launch, then wait (at most ``SKALD_GDL_WAIT_SECONDS`` in total) for the episode to end or park.

    If the client disconnects, Django cancels this coroutine: the wait ends, the run does not.
    """
    started = time.monotonic()
    response = await sync_to_async(_launch_api)(request, case_id=case_id)
    launched = getattr(response, "data", None)
    if not isinstance(launched, Launched):  # refused before or during the launch: DRF's own answer
        return await sync_to_async(_render)(response)
    deadline = started + settings.SKALD_GDL_WAIT_SECONDS
    while time.monotonic() < deadline:
        if await sync_to_async(_run_status)(launched.run_id) in SETTLED_FOR_WAIT:
            break
        await asyncio.sleep(WAIT_POLL_SECONDS)
    return await sync_to_async(_final)(launched)


# drf-spectacular documents a function view through these two attributes (the protocol DRF's own
# @api_view follows): the route is documented by the APIView that does the work. Schema metadata only.
gdl_launch.cls = GdlLaunchAPI  # type: ignore[attr-defined]
gdl_launch.initkwargs = {}  # type: ignore[attr-defined]


class HandoffDecisionInput(StrictInput):
    decision = serializers.ChoiceField(choices=["continue", "close"])
    note = serializers.CharField(required=False, allow_blank=True, max_length=8000, default="")


class BackReferralInput(StrictInput):
    note = serializers.CharField(max_length=8000)


class HandoffDecision(APIView):
    permission_classes = [roles(Role.OPERATOR)]

    @extend_schema(operation_id="run_handoff_decide", summary="Answer a run's handoff: continue or close",
                   request=HandoffDecisionInput, responses={202: RunSerializer, **error_responses(
        _400="invalid", _404="run_not_found", _409="run_state_conflict")})
    def post(self, request: Request, run_id: int) -> Response:
        body = HandoffDecisionInput(data=request.data)
        body.is_valid(raise_exception=True)
        run = run_services.run_handoff_decide(user=caller(request), run_id=run_id, **body.validated_data)
        return Response(RunSerializer(run).data, status=202)


class BackReferral(APIView):
    permission_classes = [roles(Role.OPERATOR)]

    @extend_schema(operation_id="run_back_referral_return", summary="Return a back-referral to the run with a note",
                   request=BackReferralInput, responses={202: RunSerializer, **error_responses(
        _400=("invalid", "credential_tripwire"), _404="run_not_found", _409="run_state_conflict")})
    def post(self, request: Request, run_id: int) -> Response:
        body = BackReferralInput(data=request.data)
        body.is_valid(raise_exception=True)
        run = run_services.run_back_refer(user=caller(request), run_id=run_id, note=body.validated_data["note"])
        return Response(RunSerializer(run).data, status=202)
