"""``GET /api/approval/explain`` and ``GET /api/approval/tools``: parse the query, delegate."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.rules.engine import ACTIONS, Decision
from approvals.rules.policy import PROVENANCE_FLAGS, decide, fired_provenance
from approvals.rules.selectors import agent_exists, tools_catalog, user_id_resolve
from skald.core.api.errors_schema import error_responses
from skald.core.api.input_checks import json_loads_checked
from skald.core.api.permissions import roles
from skald.core.api.strict_input import JSON_OBJECT
from skald.core.errors import SkaldError
from skald.core.roles import Role

_RULE_FIELDS = {
    "id": serializers.IntegerField(allow_null=True),
    "group": inline_serializer(
        name="ApprovalRuleGroup",
        fields={"id": serializers.IntegerField(), "name": serializers.CharField()},
        allow_null=True,
    ),
    "tool_pattern": serializers.CharField(),
    "arg_matchers": serializers.DictField(child=serializers.CharField()),
    "action": serializers.ChoiceField(choices=ACTIONS),
    "priority": serializers.IntegerField(),
    "enabled": serializers.BooleanField(),
    "approval_ttl": serializers.IntegerField(allow_null=True, help_text="Seconds."),
    "note": serializers.CharField(),
}
ExplainSerializer = inline_serializer(
    name="ApprovalExplain",
    fields={
        "decision": serializers.ChoiceField(choices=ACTIONS),
        "rule": inline_serializer(name="ApprovalDecidingRule", fields=_RULE_FIELDS, allow_null=True),
        "rule_set": serializers.CharField(allow_null=True, help_text='"global" or "group:<name>".'),
        "reason": serializers.CharField(),
        "provenance_fired": serializers.ListField(
            child=serializers.CharField(),
            help_text='The provenance conditions of the matching rules, e.g. "tainted=true" (docs/provenance.md).'),
        "trace": inline_serializer(
            name="ApprovalTraceEntry",
            many=True,
            fields={
                "rule_set": serializers.CharField(),
                "rule": inline_serializer(name="ApprovalRuleView", fields=_RULE_FIELDS),
                "result": serializers.ChoiceField(choices=("match", "no_match", "skipped")),
                "detail": serializers.CharField(),
                "chosen": serializers.BooleanField(help_text="This rule decided its rule set."),
            },
        ),
    },
)
ToolSerializer = inline_serializer(
    name="ApprovalTool",
    many=True,
    fields={
        "name": serializers.CharField(),
        "category": serializers.ChoiceField(choices=("registry", "interface", "dynamic", "mcp")),
        "description": serializers.CharField(),
    },
)


class ExplainQuery(serializers.Serializer):
    tool = serializers.CharField(min_length=1, max_length=128)
    args = serializers.CharField(required=False, default="{}", trim_whitespace=False)
    user = serializers.CharField(required=False, max_length=150)
    agent = serializers.CharField(required=False, max_length=64)
    provenance = serializers.CharField(required=False, default="", allow_blank=True, max_length=200)

    def validate_provenance(self, value: str) -> dict[str, bool]:
        named = [part.strip() for part in value.split(",") if part.strip()]
        unknown = sorted(set(named) - set(PROVENANCE_FLAGS))
        if unknown:
            raise serializers.ValidationError(f"unknown provenance condition(s): {', '.join(unknown)}")
        flags = {name: name in named for name in PROVENANCE_FLAGS}
        flags["tainted"] = any(flags[name] for name in PROVENANCE_FLAGS if name != "read_only")
        return flags

    def validate_args(self, value: str) -> dict[str, Any]:
        try:
            parsed = json_loads_checked(value, where="args")
        except SkaldError as exc:
            raise serializers.ValidationError(exc.message, code=exc.code) from None
        if not isinstance(parsed, dict):
            raise serializers.ValidationError("must be a JSON object")
        return parsed

    def validate_user(self, value: str) -> int:
        user_id = user_id_resolve(value)
        if user_id is None:  # a name that exists nowhere, like an id: 404
            raise SkaldError(f"No user named {value!r}.", code="user_unknown", http_status=404)
        return user_id

    def validate_agent(self, value: str) -> str:
        if not agent_exists(value):
            raise SkaldError(f"No agent named {value!r}.", code="agent_unknown", http_status=404)
        return value


def explain_body(decision: Decision) -> dict[str, Any]:
    return {
        "decision": decision.action,
        "rule": decision.rule.as_dict() if decision.rule is not None else None,
        "rule_set": decision.rule_set,
        "reason": decision.reason,
        "provenance_fired": fired_provenance(decision),
        "trace": [entry.as_dict() for entry in decision.trace],
    }


class ExplainView(APIView):
    permission_classes = [roles(Role.APPROVER, Role.OPERATOR)]

    @extend_schema(
        operation_id="approval_explain",
        summary="Explain the gate's decision for a call",
        description=(
            "Evaluates the approval rules exactly as the gate would for a call of `tool` with `args` "
            "by `user` and/or `agent`, and returns the decision, the rule that decided and every rule "
            "considered. Semantics: within a rule set (the global rules, each security group) the "
            "matching rule with the lowest priority decides (ties: deny over require over allow); "
            "across sets the most restrictive decision wins; no matching rule, no scope (neither user "
            "nor agent) or an engine fault denies."
        ),
        parameters=[
            OpenApiParameter("tool", {"type": "string", "minLength": 1, "maxLength": 128}, required=True,
                             description="Tool name."),
            OpenApiParameter("args", OpenApiTypes.STR, description='Arguments as a JSON object, e.g. {"path": "a"}.',
                             extensions={JSON_OBJECT: True}),
            OpenApiParameter("user", OpenApiTypes.STR, description="Username or user id."),
            OpenApiParameter("agent", OpenApiTypes.STR, description="Agent name."),
            OpenApiParameter("provenance", OpenApiTypes.STR, many=True, explode=False, style="form",
                             enum=list(PROVENANCE_FLAGS),
                             description="The call's provenance, comma-separated: any of "
                             + ", ".join(PROVENANCE_FLAGS) + " (any but read_only implies tainted)."),
        ],
        responses={200: ExplainSerializer, **error_responses(_400="invalid", _404=("user_unknown", "agent_unknown"))},
    )
    def get(self, request: Request) -> Response:
        query = ExplainQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        decision = decide(tool=data["tool"], args=data["args"], user_id=data.get("user"), agent=data.get("agent"),
                          provenance=data.get("provenance") or None)
        return Response(explain_body(decision))


class ToolListView(APIView):
    permission_classes = [roles(Role.APPROVER, Role.OPERATOR)]

    @extend_schema(
        operation_id="approval_tools",
        summary="Every tool that can be gated",
        description=(
            "Registry tools, built-in interface tools and every tool ever offered to a model "
            "(known tools, category `dynamic`, or `mcp` for an MCP server's tool), deduplicated: a name "
            "appears once, under the first category that knows it (registry, interface, then its own)."
        ),
        responses={200: ToolSerializer, **error_responses()},
    )
    def get(self, request: Request) -> Response:
        return Response(tools_catalog())
