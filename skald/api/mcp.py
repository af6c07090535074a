"""``/api/mcp/servers/…``: MCP servers and their tools over REST (issue 29), admins only.

Views parse and delegate to :mod:`skald.mcp.services` (the admin's services: same validation at
save, same audit rows). A server that cannot be reached when it is enabled answers ``409
mcp_server_unreachable`` with the error recorded on the server, never a 5xx.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.actors import Actor
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import AdminRequired, caller
from skald.core.api.schema import MAX_ID
from skald.core.api.strict_input import StrictInput
from skald.core.errors import NotFound
from skald.mcp.definitions import definition_diff, offered_name
from skald.mcp.elicitation import ACTIONS, elicitation_view, elicitations_pending_for, mcp_elicitation_answer
from skald.mcp.models import (
    McpElicitationStatus,
    McpServer,
    McpServerStatus,
    McpTool,
    McpToolStatus,
    McpTransport,
    McpTrust,
)
from skald.mcp.services import mcp_server_create, mcp_server_delete, mcp_server_update

SAVE_CODES = ("invalid", "mcp_invalid", "mcp_name_invalid", "mcp_name_immutable", "mcp_transport_invalid",
              "mcp_trust_invalid", "mcp_argv_invalid", "mcp_program_not_allowed", "mcp_url_invalid",
              "mcp_ssrf_refused", "mcp_secret_invalid", "mcp_agents_invalid", "mcp_allow_cidrs_invalid",
              "mcp_field_unknown")


def _errors(**by_status: tuple[str, ...] | str) -> dict[int, Any]:
    by_status["_403"] = "admin_required"
    return error_responses(authenticated=True, **by_status)  # type: ignore[arg-type]  # keys are _<status>


class SecretFile(StrictInput):
    name = serializers.CharField(max_length=64, help_text="The variable's or header's name.")
    file = serializers.CharField(max_length=500, help_text="Absolute path of the file holding the value (the "
                                                           "value itself is never sent or stored).")


def _secret_list(help_text: str) -> serializers.ListField:
    return serializers.ListField(child=SecretFile(), required=False, max_length=32, help_text=help_text)


class ServerInput(StrictInput):
    # The schema's pattern; "no double underscore" is the service's (400 mcp_name_invalid).
    name = serializers.RegexField(r"^[a-z0-9][a-z0-9_-]{0,23}$", max_length=24,
                                  help_text="A slug without '__' (tools are offered as mcp__{name}__{tool}).")
    transport = serializers.ChoiceField(choices=McpTransport.values)
    argv = serializers.ListField(child=serializers.CharField(max_length=500), required=False, max_length=64,
                                 help_text="stdio: the program (in SKALD_MCP_STDIO_ALLOWLIST) and its arguments.")
    url = serializers.CharField(max_length=500, required=False, allow_blank=True,
                                help_text="http: the Streamable HTTP endpoint (SSRF-screened).")
    secret_env = _secret_list("stdio: environment variables, each read from its file at connect.")
    secret_headers = _secret_list("http: headers, each read from its file at connect.")
    trust = serializers.ChoiceField(choices=McpTrust.values, required=False)
    agents = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=1000,
                                   help_text='Agent names that get its tools, or ["*"].')
    enabled = serializers.BooleanField(required=False,
                                       help_text="Turning it on discovers the tools and pins their definitions.")
    allow_sampling = serializers.BooleanField(required=False, help_text="Serve its sampling requests with the "
                                              "calling frame's model, tokens charged to its budget (default off).")


class ServerView(serializers.Serializer):
    name = serializers.CharField()
    transport = serializers.ChoiceField(choices=McpTransport.values)
    argv = serializers.ListField(child=serializers.CharField())
    url = serializers.CharField(allow_blank=True)
    secret_env = serializers.DictField(child=serializers.CharField(), help_text="name → file path")
    secret_headers = serializers.DictField(child=serializers.CharField(), help_text="name → file path")
    trust = serializers.ChoiceField(choices=McpTrust.values)
    agents = serializers.ListField(child=serializers.CharField())
    enabled = serializers.BooleanField()
    allow_sampling = serializers.BooleanField()
    status = serializers.ChoiceField(choices=McpServerStatus.values)
    last_error = serializers.CharField(allow_blank=True)
    tools = serializers.DictField(child=serializers.IntegerField(), help_text="Tools by status.")


class DeletedServer(serializers.Serializer):
    name = serializers.CharField()
    deleted = serializers.BooleanField()


class ToolView(serializers.Serializer):
    name = serializers.CharField(help_text="The tool's name on its server.")
    offered_as = serializers.CharField(help_text="The name models see and rules match.")
    description = serializers.CharField(allow_blank=True)
    input_schema = serializers.DictField()
    annotations = serializers.DictField()
    digest = serializers.CharField(allow_blank=True, help_text="SHA-256 of the pinned definition.")
    status = serializers.ChoiceField(choices=McpToolStatus.values)
    pending = serializers.DictField(help_text="Quarantined: the definition the server lists now.")
    pending_digest = serializers.CharField(allow_blank=True)
    diff = serializers.CharField(allow_blank=True, help_text="Quarantined: pinned vs listed, a unified diff.")


def server_view(server: McpServer) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for tool in server.tools.all():
        counts[tool.status] = counts.get(tool.status, 0) + 1
    return {"name": server.name, "transport": server.transport, "argv": list(server.argv), "url": server.url,
            "secret_env": dict(server.secret_env), "secret_headers": dict(server.secret_headers),
            "trust": server.trust, "agents": list(server.agents), "enabled": server.enabled,
            "allow_sampling": server.allow_sampling, "status": server.status, "last_error": server.last_error,
            "tools": counts}


def tool_view(tool: McpTool, server: str) -> dict[str, Any]:
    pinned = {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema,
              "annotations": tool.annotations}
    return {"name": tool.name, "offered_as": offered_name(server, tool.name), "description": tool.description,
            "input_schema": tool.input_schema, "annotations": tool.annotations, "digest": tool.digest,
            "status": tool.status, "pending": tool.pending, "pending_digest": tool.pending_digest,
            "diff": definition_diff(pinned, tool.pending) if tool.pending else ""}


def server_get(name: str) -> McpServer:
    server = McpServer.objects.prefetch_related("tools").filter(name=name).first()
    if server is None:
        raise NotFound("no MCP server with this name", code="mcp_server_not_found")
    return server


def _parsed(request: Request, *, partial: bool = False) -> dict[str, Any]:
    body = ServerInput(data=request.data, partial=partial)
    body.is_valid(raise_exception=True)
    data = dict(body.validated_data)
    for key in ("secret_env", "secret_headers"):
        if key in data:  # a list of {name, file} on the wire, name -> file in the record
            data[key] = {item["name"]: item["file"] for item in data[key]}
    return data


class ServerList(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="mcp_server_list", summary="List MCP servers with their status",
                   responses={200: ServerView(many=True), **_errors()})
    def get(self, request: Request) -> Response:
        return Response([server_view(s) for s in McpServer.objects.prefetch_related("tools").order_by("name")])

    @extend_schema(operation_id="mcp_server_create", summary="Register an MCP server",
                   description="Validated at save: a stdio program must be in `SKALD_MCP_STDIO_ALLOWLIST`, an "
                               "http URL must pass the SSRF screen. `enabled: true` discovers and pins its tools.",
                   request=ServerInput, responses={201: ServerView, **_errors(
                       _400=SAVE_CODES, _409=("mcp_name_taken", "mcp_server_unreachable"))})
    def post(self, request: Request) -> Response:
        server = mcp_server_create(actor=Actor.user(caller(request)), data=_parsed(request))
        return Response(server_view(server_get(server.name)), status=status.HTTP_201_CREATED)


class ServerDetail(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="mcp_server_get", summary="Read an MCP server",
                   responses={200: ServerView, **_errors(_404="mcp_server_not_found")})
    def get(self, request: Request, name: str) -> Response:
        return Response(server_view(server_get(name)))

    @extend_schema(operation_id="mcp_server_update", summary="Change an MCP server",
                   description="Only the fields given change. Turning `enabled` on re-discovers and re-pins.",
                   request=ServerInput(partial=True), responses={200: ServerView, **_errors(
                       _400=SAVE_CODES, _404="mcp_server_not_found", _409="mcp_server_unreachable")})
    def patch(self, request: Request, name: str) -> Response:
        data = _parsed(request, partial=True)
        server = mcp_server_update(actor=Actor.user(caller(request)), server=server_get(name), data=data)
        return Response(server_view(server_get(server.name)))

    @extend_schema(operation_id="mcp_server_delete", summary="Delete an MCP server and its tools",
                   responses={200: DeletedServer, **_errors(_404="mcp_server_not_found")})
    def delete(self, request: Request, name: str) -> Response:
        mcp_server_delete(actor=Actor.user(caller(request)), server=server_get(name))
        return Response({"name": name, "deleted": True})


class ServerTools(APIView):
    permission_classes = [AdminRequired]

    @extend_schema(operation_id="mcp_server_tools", summary="List an MCP server's tools, pins and quarantines",
                   responses={200: ToolView(many=True), **_errors(_404="mcp_server_not_found")})
    def get(self, request: Request, name: str) -> Response:
        server = server_get(name)
        return Response([tool_view(t, server.name) for t in sorted(server.tools.all(), key=lambda t: t.name)])


class ElicitationAnswer(StrictInput):
    action = serializers.ChoiceField(choices=ACTIONS, help_text="accept (with content), decline or cancel.")
    content = serializers.DictField(required=False, help_text="accept: the answer, valid against the requested "
                                                              "schema.")


class ElicitationView(serializers.Serializer):
    id = serializers.IntegerField()
    server = serializers.CharField()
    tool = serializers.CharField()
    session = serializers.IntegerField()
    exchange = serializers.IntegerField()
    call = serializers.IntegerField()
    message = serializers.CharField()
    requested_schema = serializers.DictField()
    status = serializers.ChoiceField(choices=McpElicitationStatus.values)
    answer = serializers.DictField(allow_null=True)
    answered_by = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    answered_at = serializers.DateTimeField(allow_null=True)


class ElicitationQuery(serializers.Serializer):
    session = serializers.IntegerField(min_value=0, max_value=MAX_ID, help_text="The session's id.")


class ElicitationList(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(operation_id="mcp_elicitation_list", summary="A session's pending MCP elicitations",
                   description="For the session's owner or an admin; anyone else gets an empty list.",
                   parameters=[ElicitationQuery],
                   responses={200: ElicitationView(many=True), **error_responses(_400="invalid")})
    def get(self, request: Request) -> Response:
        query = ElicitationQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = elicitations_pending_for(user=caller(request), session_id=query.validated_data["session"])
        return Response([elicitation_view(row) for row in rows])


class ElicitationAnswerView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(operation_id="mcp_elicitation_answer", summary="Answer an MCP server's elicitation",
                   description="Only the session's owner or an admin may answer. `accept` needs `content` valid "
                               "against the requested schema; the waiting call goes on with the answer.",
                   request=ElicitationAnswer, responses={200: ElicitationView, **error_responses(
                       _400=("invalid", "unknown_field", "mcp_elicitation_content_invalid"),
                       _403="mcp_elicitation_forbidden", _404="mcp_elicitation_not_found",
                       _409="mcp_elicitation_settled")})
    def post(self, request: Request, elicitation_id: int) -> Response:
        body = ElicitationAnswer(data=request.data)
        body.is_valid(raise_exception=True)
        row = mcp_elicitation_answer(user=caller(request), elicitation_id=elicitation_id,
                                     action=body.validated_data["action"],
                                     content=body.validated_data.get("content"))
        return Response(elicitation_view(row))


__all__ = ["ElicitationAnswerView", "ElicitationList", "ServerDetail", "ServerList", "ServerTools"]
