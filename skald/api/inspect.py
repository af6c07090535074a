"""``GET /api/inspect?agent=<name>``: the inspector's rendering for operators and auditors."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from loop.errors import HarnessError
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import roles
from skald.core.errors import NotFound
from skald.core.roles import Role
from skald.inspector import inspect_agent
from skald.loop_adapters.catalog import AgentRowCatalog


class InspectView(APIView):
    permission_classes = [roles(Role.OPERATOR, Role.AUDITOR)]

    @extend_schema(operation_id="inspect_agent", summary="The assembled services of an agent (names and scalars)",
                   parameters=[OpenApiParameter("agent", str, description="Default: troubleshooter.")],
                   responses={200: dict, **error_responses(_404="agent_unknown")})
    def get(self, request: Request) -> Response:
        name = request.query_params.get("agent") or "troubleshooter"
        try:
            agent = AgentRowCatalog().get(name)
        except HarnessError:
            raise NotFound(f"No enabled agent named {name!r}.", code="agent_unknown") from None
        return Response(inspect_agent(agent))
