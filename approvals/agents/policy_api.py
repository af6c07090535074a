"""``/api/policy/agents/``: each agent's governance settings over REST (issue 32) — tools, bounds and
default budget, exec allow-list, MCP servers — admins only, with ETag / If-Match. Read and change
only: agents are created and deleted in the admin."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.agents import conditional
from approvals.policy_api_schema import ETAG_HEADER, IF_MATCH, admin_errors
from audit.actors import Actor
from skald.core.api.conditional import etag_of, if_match_require
from skald.core.api.permissions import AdminRequired, caller
from skald.core.api.strict_input import StrictInput
from skald.mcp.models import McpServer
from skald.models import Agent

MAX_BOUND = 2**31 - 1


def _positive(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=1, max_value=MAX_BOUND, required=False, help_text=help_text)


class BoundsInput(StrictInput):
    # The loop's bounds an agent overrides (loop/bounds.py); a bound left out keeps the default.
    max_turns = _positive("Model turns per run.")
    tool_output_cap = _positive("Bytes of one tool's output kept.")
    tool_timeout = serializers.FloatField(min_value=0.001, max_value=86400, required=False,
                                          help_text="Seconds one tool may run.")
    request_cap = _positive("Bytes of one provider request.")
    replay_cap = _positive("Bytes of replayed history.")
    payload_cap = _positive("Bytes of one payload.")
    max_parallel_calls = _positive("Tool calls run at once.")
    budget_tokens = serializers.IntegerField(min_value=1, max_value=2**53, required=False, allow_null=True,
                                             help_text="The agent's default token budget; null: none.")


class AgentPolicyInput(StrictInput):
    tools = serializers.ListField(child=serializers.CharField(max_length=128), max_length=500, required=False,
                                  help_text="The tools it may use, in its own order (replaces the list).")
    bounds = BoundsInput(required=False, help_text="Overrides of the loop bounds (replaces them).")
    exec_allowlist = serializers.ListField(child=serializers.CharField(max_length=200), max_length=500,
                                           required=False, allow_null=True,
                                           help_text="Programs it may run as a child; null: its parent's.")
    mcp_servers = serializers.ListField(
        child=serializers.SlugField(max_length=40), max_length=500, required=False,
        help_text="The MCP servers whose tools it gets (replaces the set; each server's own agent list changes).")


class PolicyAgent(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    tools = serializers.ListField(child=serializers.CharField())
    bounds = serializers.DictField(help_text="Its overrides of the loop bounds as stored (`budget_tokens`: its "
                                             "default budget).")
    exec_allowlist = serializers.ListField(child=serializers.CharField(), allow_null=True)
    mcp_servers = serializers.ListField(child=serializers.CharField(),
                                        help_text="The MCP servers whose tools it gets (by name or '*').")
    etag = serializers.CharField(help_text="The ETag header's value.")


def _body(agent: Agent, servers: list[McpServer] | None = None) -> dict[str, Any]:
    view = conditional.agent_view(agent, servers)
    return {**view, "etag": etag_of(view)}


class AgentPolicyList(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_agent_list", summary="List agents' governance settings",
                   responses={200: PolicyAgent(many=True), **admin_errors()})
    def get(self, request: Request) -> Response:
        servers = list(McpServer.objects.order_by("name"))  # read once for every agent
        return Response([_body(agent, servers) for agent in Agent.objects.order_by("name")])


class AgentPolicyDetail(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="policy_agent_get", summary="Read an agent's governance settings and ETag",
                   parameters=[ETAG_HEADER], responses={200: PolicyAgent, **admin_errors(_404="agent_not_found")})
    def get(self, request: Request, agent_id: int) -> Response:
        body = _body(conditional.agent_get(agent_id))
        return Response(body, headers={"ETag": body["etag"]})

    @extend_schema(operation_id="policy_agent_update",
                   summary="Change an agent's tools, bounds, budget or MCP servers (If-Match)",
                   description="Through the admin's services (`agent_save`: the bounds check and the "
                               "`skald.agent.changed` audit row; `mcp_server_update` for each server whose "
                               "agent list changes). Each field given replaces the setting. A server that "
                               "serves every agent (`*`) cannot leave one out: 409.",
                   request=AgentPolicyInput, parameters=[IF_MATCH, ETAG_HEADER],
                   responses={200: PolicyAgent, **admin_errors(
                       _400=("invalid", "bounds_invalid"), _404=("agent_not_found", "mcp_server_not_found"),
                       _409="mcp_server_serves_every_agent", conditional=True)})
    def patch(self, request: Request, agent_id: int) -> Response:
        parsed = AgentPolicyInput(data=request.data)
        parsed.is_valid(raise_exception=True)
        fields = dict(parsed.validated_data)
        if "bounds" in fields:
            fields["bounds"] = dict(fields["bounds"])
        agent = conditional.agent_policy_update(actor=Actor.user(caller(request)), agent_id=agent_id,
                                                if_match=if_match_require(request.headers.get("If-Match")),
                                                fields=fields)
        body = _body(agent)
        return Response(body, headers={"ETag": body["etag"]})
