"""``/api/policy/rules/`` and ``/api/policy/groups/``: approval rules and security groups over REST
(issue 32), admins only. Views parse and delegate to :mod:`approvals.rules.conditional`, which
writes through the admin's services (same checks, same audit rows).

Every answer that carries a row carries its ``ETag`` (also ``etag`` in the body); ``PATCH`` and
``DELETE`` need ``If-Match`` (428 without it, 412 when the row changed since).
"""

from __future__ import annotations

from typing import Any

from django.db.models import F
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.models import ApprovalRule, SecurityGroup
from approvals.policy_api_schema import ETAG_HEADER, IF_MATCH, admin_errors
from approvals.policy_doc.parse import MAX_PRIORITY
from approvals.rules import conditional
from approvals.rules.engine import ACTIONS
from approvals.rules.seed import DEFAULT_PRIORITY
from audit.actors import Actor
from skald.core.api.conditional import if_match_require
from skald.core.api.permissions import AdminRequired, caller
from skald.core.api.strict_input import NUL_FREE, StrictInput

MAX_TTL = 10 * 365 * 24 * 3600  # seconds; ten years is "never" for an approval


@extend_schema_field({"type": "object", "propertyNames": {"pattern": NUL_FREE},
                      "additionalProperties": {"type": "string", "pattern": NUL_FREE}})
class ArgMatchersField(serializers.DictField):
    """Argument path (dotted: ``argv.0``) → the glob its value must match; empty: any arguments."""

    child = serializers.CharField(allow_blank=True, trim_whitespace=False)


class RuleInput(StrictInput):
    group = serializers.CharField(max_length=80, allow_null=True, required=False, default=None,
                                  help_text="The security group's name; null (or left out): a global rule.")
    tool_pattern = serializers.CharField(max_length=128, help_text="A tool name or a glob: 'read_*', '*'.")
    arg_matchers = ArgMatchersField(required=False, default=dict)
    action = serializers.ChoiceField(choices=ACTIONS)
    priority = serializers.IntegerField(min_value=0, max_value=MAX_PRIORITY, required=False, default=DEFAULT_PRIORITY,
                                        help_text="Lower is tried first within a rule set.")
    approval_ttl = serializers.IntegerField(min_value=0, max_value=MAX_TTL, allow_null=True, required=False,
                                            default=None, help_text="Seconds an approval this rule raises waits; "
                                                                    "null: 24 hours.")
    enabled = serializers.BooleanField(required=False, default=True)
    note = serializers.CharField(max_length=200, allow_blank=True, required=False, default="")


class PolicyRuleFields(serializers.Serializer):
    id = serializers.IntegerField()
    group = serializers.CharField(allow_null=True, help_text="The group's name; null: a global rule.")
    tool_pattern = serializers.CharField()
    arg_matchers = serializers.DictField(child=serializers.CharField(allow_blank=True))
    action = serializers.ChoiceField(choices=ACTIONS)
    priority = serializers.IntegerField()
    approval_ttl = serializers.IntegerField(allow_null=True, help_text="Seconds; null: 24 hours.")
    enabled = serializers.BooleanField()
    note = serializers.CharField(allow_blank=True)


class PolicyRule(PolicyRuleFields):
    hit_count = serializers.IntegerField(help_text="Calls it decided (not part of its version).")
    etag = serializers.CharField(help_text="The ETag header's value.")


class DeletedRule(PolicyRuleFields):
    hit_count = serializers.IntegerField()
    deleted = serializers.BooleanField()


class GroupInput(StrictInput):
    name = serializers.CharField(max_length=80)
    description = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")
    users = serializers.ListField(child=serializers.CharField(max_length=150), required=False, default=list,
                                  max_length=1000, help_text="Usernames; replaces the membership.")
    agents = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list,
                                   max_length=1000, help_text="Agent names; replaces the membership.")


class PolicyGroup(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    users = serializers.ListField(child=serializers.CharField())
    agents = serializers.ListField(child=serializers.CharField())
    rules = PolicyRuleFields(many=True)
    etag = serializers.CharField(help_text="The ETag header's value (it covers the rules too).")


class DeletedGroup(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    users = serializers.ListField(child=serializers.CharField())
    agents = serializers.ListField(child=serializers.CharField())
    rules = PolicyRuleFields(many=True)
    deleted = serializers.BooleanField()


def _parsed(serializer: type[StrictInput], request: Request, *, partial: bool = False) -> dict[str, Any]:
    body = serializer(data=request.data, partial=partial)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


def _rule_body(rule: ApprovalRule) -> dict[str, Any]:
    return {**conditional.rule_view(rule), "etag": conditional.rule_etag(rule)}


def _group_body(group: SecurityGroup) -> dict[str, Any]:
    view = conditional.group_view(group)
    return {**view, "etag": conditional.group_etag(view)}


def _tagged(body: dict[str, Any], status_code: int = status.HTTP_200_OK) -> Response:
    return Response(body, status=status_code, headers={"ETag": body["etag"]})


class RuleList(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_rule_list", summary="List approval rules (global and in groups)",
                   description="Global rules first, then each group's by name; within a set by priority.",
                   responses={200: PolicyRule(many=True), **admin_errors()})
    def get(self, request: Request) -> Response:
        rules = ApprovalRule.objects.select_related("group").order_by(F("group__name").asc(nulls_first=True),
                                                                      "priority", "id")
        return Response([_rule_body(rule) for rule in rules])

    @extend_schema(operation_id="policy_rule_create", summary="Create an approval rule",
                   description="Through the admin's service: the same checks and the same audit row "
                               "(`approvals.rule.changed`).",
                   request=RuleInput, parameters=[ETAG_HEADER],
                   responses={201: PolicyRule, **admin_errors(_400=("invalid", "rule_invalid"),
                                                                     _404="group_unknown")})
    def post(self, request: Request) -> Response:
        rule = conditional.approval_rule_create(actor=Actor.user(caller(request)), fields=_parsed(RuleInput, request))
        return _tagged(_rule_body(rule), status.HTTP_201_CREATED)


class RuleDetail(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_rule_get", summary="Read an approval rule and its ETag",
                   parameters=[ETAG_HEADER],
                   responses={200: PolicyRule, **admin_errors(_404="rule_not_found")})
    def get(self, request: Request, rule_id: int) -> Response:
        return _tagged(_rule_body(conditional.rule_get(rule_id)))

    @extend_schema(operation_id="policy_rule_update", summary="Change an approval rule (If-Match)",
                   description="Only the fields given change. `group` moves the rule to another set.",
                   request=RuleInput(partial=True), parameters=[IF_MATCH, ETAG_HEADER],
                   responses={200: PolicyRule, **admin_errors(
                       _400=("invalid", "rule_invalid"), _404=("rule_not_found", "group_unknown"),
                       conditional=True)})
    def patch(self, request: Request, rule_id: int) -> Response:
        fields = _parsed(RuleInput, request, partial=True)
        rule = conditional.approval_rule_update(actor=Actor.user(caller(request)), rule_id=rule_id,
                                                if_match=if_match_require(request.headers.get("If-Match")),
                                                fields=fields)
        return _tagged(_rule_body(rule))

    @extend_schema(operation_id="policy_rule_delete", summary="Delete an approval rule (If-Match)",
                   description="Answers the rule as it was (its audit row keeps it too).",
                   parameters=[IF_MATCH],
                   responses={200: DeletedRule, **admin_errors(_404="rule_not_found", conditional=True)})
    def delete(self, request: Request, rule_id: int) -> Response:
        was = conditional.approval_rule_remove(actor=Actor.user(caller(request)), rule_id=rule_id,
                                               if_match=if_match_require(request.headers.get("If-Match")))
        return Response({**was, "deleted": True})


class GroupList(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_group_list", summary="List security groups with members and rules",
                   responses={200: PolicyGroup(many=True), **admin_errors()})
    def get(self, request: Request) -> Response:
        groups = SecurityGroup.objects.prefetch_related(*conditional.GROUP_PREFETCH).order_by("name")
        return Response([_group_body(group) for group in groups])

    @extend_schema(operation_id="policy_group_create", summary="Create a security group with its members",
                   description="Its rules are created with `POST /api/policy/rules/` naming the group.",
                   request=GroupInput, parameters=[ETAG_HEADER],
                   responses={201: PolicyGroup, **admin_errors(
                       _400="invalid", _404=("user_unknown", "agent_unknown"), _409="group_name_taken")})
    def post(self, request: Request) -> Response:
        group = conditional.security_group_create(actor=Actor.user(caller(request)),
                                                  fields=_parsed(GroupInput, request))
        return _tagged(_group_body(group), status.HTTP_201_CREATED)


class GroupDetail(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_group_get", summary="Read a security group and its ETag",
                   description="The ETag covers the group's rules too: deleting the group deletes them.",
                   parameters=[ETAG_HEADER],
                   responses={200: PolicyGroup, **admin_errors(_404="group_not_found")})
    def get(self, request: Request, group_id: int) -> Response:
        return _tagged(_group_body(conditional.group_get(group_id)))

    @extend_schema(operation_id="policy_group_update", summary="Change a security group (If-Match)",
                   description="Only the fields given change; `users` and `agents` replace the membership.",
                   request=GroupInput(partial=True), parameters=[IF_MATCH, ETAG_HEADER],
                   responses={200: PolicyGroup, **admin_errors(
                       _400="invalid", _404=("group_not_found", "user_unknown", "agent_unknown"),
                       _409="group_name_taken", conditional=True)})
    def patch(self, request: Request, group_id: int) -> Response:
        fields = _parsed(GroupInput, request, partial=True)
        group = conditional.security_group_update(actor=Actor.user(caller(request)), group_id=group_id,
                                                  if_match=if_match_require(request.headers.get("If-Match")),
                                                  fields=fields)
        return _tagged(_group_body(group))

    @extend_schema(operation_id="policy_group_delete", summary="Delete a security group and its rules (If-Match)",
                   description="Answers the group as it was, with the rules deleted with it.",
                   parameters=[IF_MATCH],
                   responses={200: DeletedGroup, **admin_errors(_404="group_not_found", conditional=True)})
    def delete(self, request: Request, group_id: int) -> Response:
        was = conditional.security_group_remove(actor=Actor.user(caller(request)), group_id=group_id,
                                                if_match=if_match_require(request.headers.get("If-Match")))
        return Response({**was, "deleted": True})
