"""``POST /api/policy/plan`` and ``POST /api/policy/apply``: the policy document's plan and apply over
REST (issue 32), admins only. The same calls as ``manage.py skald_policy plan --json`` / ``apply``,
with the same error codes (``policy_invalid`` 400, ``policy_changed`` 409).
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.policy_api_schema import admin_errors
from approvals.policy_doc.apply import policy_apply
from approvals.policy_doc.document import PolicyDoc
from approvals.policy_doc.history import DEFAULT_DAYS
from approvals.policy_doc.parse import PolicyInvalid, Problem, load_text, parse
from approvals.policy_doc.plan import policy_plan
from audit.actors import Actor
from skald.core.api.permissions import AdminRequired, caller
from skald.core.api.strict_input import StrictInput

MAX_DOCUMENT = 256 * 1024  # characters; SKALD_BODY_LIMITS["policy-plan"/"policy-apply"] admits it escaped
MAX_DAYS = 366
DIGEST = r"^[0-9a-f]{64}$"
DOCUMENT_HELP = ("The policy document as YAML text (docs/policy.md; its JSON Schema is "
                 "`manage.py skald_policy schema`). A document that does not parse or does not hold is "
                 "400 `policy_invalid`, each problem named by its path in the document.")
# policy_invalid is 400 although the body is schema-valid: the document is YAML in a string, a
# language the OpenAPI schema cannot describe (its own JSON Schema does), and it is what the command
# answers (exit 2). tests/api_client/test_api_contract.py names it as the one such exception.
ERRORS_PLAN = admin_errors(_400=("invalid", "policy_invalid"))
ERRORS_APPLY = admin_errors(_400=("invalid", "policy_invalid"), _409="policy_changed")


class PlanInput(StrictInput):
    document = serializers.CharField(max_length=MAX_DOCUMENT, trim_whitespace=False, help_text=DOCUMENT_HELP)
    days = serializers.IntegerField(min_value=1, max_value=MAX_DAYS, required=False, default=DEFAULT_DAYS,
                                    help_text="Re-decide this many days of recorded gate decisions.")
    impact = serializers.BooleanField(required=False, default=True, help_text="false: leave the preview out.")


class ApplyInput(StrictInput):
    document = serializers.CharField(max_length=MAX_DOCUMENT, trim_whitespace=False, help_text=DOCUMENT_HELP)
    expect_digest = serializers.RegexField(DIGEST, required=False, allow_null=True, default=None,
                                           help_text="Refuse (409 `policy_changed`) unless the live policy has "
                                                     "this digest: the plan's `live_digest`.")


def _changes() -> serializers.ListField:
    return serializers.ListField(child=serializers.DictField(), help_text=(
        "Each: `op`, `subject`, `group`, `path`, `id`, `fields`, `before`, `after`, `words` (docs/policy.md)."))


PlanSerializer = inline_serializer(name="PolicyPlan", fields={
    "live_digest": serializers.CharField(help_text="Pass it to apply as `expect_digest`."),
    "digest": serializers.CharField(help_text="The document's: the live digest once it is applied."),
    "changes": _changes(),
    "warnings": inline_serializer(name="PolicyWarning", many=True, fields={
        "path": serializers.CharField(), "message": serializers.CharField()}),
    "impact": serializers.DictField(allow_null=True, help_text="The impact preview (docs/policy.md); null "
                                                               "when `impact` is false."),
})
AppliedSerializer = inline_serializer(name="PolicyApplied", fields={
    "digest": serializers.CharField(help_text="The live policy's digest now."),
    "previous_digest": serializers.CharField(),
    "changes": _changes(),
})


def call_link(call_id: str) -> str:
    """The admin page of a recorded call (a path, as the command gives it)."""
    return reverse("admin:loop_toolcall_change", args=[call_id])


def document_parse(text: str) -> PolicyDoc:
    """YAML text → document; anything malformed is ``policy_invalid`` (never a 500)."""
    try:
        return parse(load_text(text))
    except RecursionError:  # YAML nested past the parser's stack
        raise PolicyInvalid([Problem("$", "yaml_syntax", "The document nests too deeply.")]) from None


def _parsed(serializer: type[StrictInput], request: Request) -> dict[str, Any]:
    body = serializer(data=request.data)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


class PolicyPlanView(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_plan", summary="Plan a policy document: changes, warnings, impact",
                   description="What applying the document would change, its lint warnings and the impact "
                               "on recorded calls — `manage.py skald_policy plan --json`. Changes nothing.",
                   request=PlanInput, responses={200: PlanSerializer, **ERRORS_PLAN})
    def post(self, request: Request) -> Response:
        data = _parsed(PlanInput, request)
        plan = policy_plan(document_parse(data["document"]), days=data["days"] if data["impact"] else None)
        return Response(plan.as_dict(call_link))


class PolicyApplyView(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_apply", summary="Apply a policy document in one transaction",
                   description="All or nothing, through the admin's services, with one "
                               "`approvals.policy.applied` audit row naming the document's digest — "
                               "`manage.py skald_policy apply`. The caller is the actor.",
                   request=ApplyInput, responses={200: AppliedSerializer, **ERRORS_APPLY})
    def post(self, request: Request) -> Response:
        data = _parsed(ApplyInput, request)
        applied = policy_apply(actor=Actor.user(caller(request)), doc=document_parse(data["document"]),
                               expect_digest=data["expect_digest"])
        return Response(applied.as_dict())
