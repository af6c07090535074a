"""``/api/auth/token/`` and ``/api/auth/token/refresh/``: simplejwt's views, documented with their errors."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework_simplejwt.serializers import TokenObtainPairSerializer, TokenRefreshSerializer
from rest_framework_simplejwt.views import TokenObtainPairView, TokenRefreshView

from skald.core.api.errors_schema import error_responses


class TokenObtain(TokenObtainPairView):
    @extend_schema(
        operation_id="auth_token_obtain",
        summary="Obtain an access and a refresh token",
        description="Exchange a username and password for a JWT pair. Send the access token as "
                    "`Authorization: Bearer <access>`; it expires after `SKALD_JWT_ACCESS_MINUTES` (15 by default).",
        responses={200: TokenObtainPairSerializer,
                   **error_responses(authenticated=False, _400="invalid", _401="no_active_account")},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().post(request, *args, **kwargs)


class TokenRefresh(TokenRefreshView):
    @extend_schema(
        operation_id="auth_token_refresh",
        summary="Refresh an access token",
        description="Exchange a refresh token (valid one day) for a new access token.",
        responses={200: TokenRefreshSerializer, **error_responses(
            authenticated=False, _400="invalid", _401=("token_not_valid", "no_active_account"))},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().post(request, *args, **kwargs)
