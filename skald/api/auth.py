"""``/api/auth/token/``, ``/api/auth/token/refresh/``, ``/api/auth/sign-out/``: simplejwt's views with
brute-force protection (django-axes), sign-in audit and revocation (``skald.identity``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in
from django.core.exceptions import ObjectDoesNotExist
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework_simplejwt.exceptions import InvalidToken, TokenError
from rest_framework_simplejwt.serializers import TokenObtainPairSerializer, TokenRefreshSerializer
from rest_framework_simplejwt.tokens import RefreshToken
from rest_framework_simplejwt.views import TokenObtainPairView, TokenRefreshView

from audit.actors import Actor
from audit.kinds import AuditKind
from skald.core.api.errors_schema import error_responses
from skald.core.api.strict_input import refuse_unknown, writable_fields
from skald.core.errors import SkaldError
from skald.identity import signins
from skald.identity.lockout import LOCKED_CODE, LOCKED_MESSAGE, WARN_WITHIN
from skald.identity.revocation import tokens_revoke
from skald.identity.tokens import VersionedTokenObtainSerializer


class SignInLocked(SkaldError):
    http_status = 429


class TokenObtain(TokenObtainPairView):
    serializer_class = VersionedTokenObtainSerializer

    @extend_schema(
        operation_id="auth_token_obtain",
        summary="Obtain an access and a refresh token",
        description="Exchange a username and password for a JWT pair. Send the access token as "
                    "`Authorization: Bearer <access>`; it expires after `SKALD_JWT_ACCESS_MINUTES` (15 by default). "
                    "A wrong username or password is the same 401 (with `extra.attempts_left` once five or fewer "
                    "remain); after `SKALD_SIGNIN_FAILURE_LIMIT` (20) failures for an account from one address, or "
                    "`SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT` (100) from anywhere, every attempt at that account (from "
                    "that address) is a 429 `sign_in_locked`, the right password too, until an administrator lifts "
                    "the lock. Nobody else is locked by someone's failures.",
        request=TokenObtainPairSerializer,
        responses={200: TokenObtainPairSerializer,
                   **error_responses(authenticated=False, _400="invalid", _401="no_active_account",
                                     _429=LOCKED_CODE)},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        refuse_unknown(request.data, writable_fields(serializer))
        try:
            serializer.is_valid(raise_exception=True)
        except TokenError as exc:
            raise InvalidToken(exc.args[0]) from exc
        except AuthenticationFailed as refused:
            if getattr(request, "axes_locked_out", False):
                raise SignInLocked(LOCKED_MESSAGE, code=LOCKED_CODE) from None
            left = settings.AXES_FAILURE_LIMIT - int(getattr(request, "axes_failures_since_start", 0) or 0)
            if 0 < left <= WARN_WITHIN:  # near a lockout: say how near, the same for any wrong name or password
                raise SkaldError(str(refused.detail), code="no_active_account", http_status=401,
                                 attempts_left=left) from None
            raise
        user = serializer.user  # type: ignore[attr-defined]
        # The same signal as an admin sign-in: axes resets the account's counter, the audit row is written.
        user_logged_in.send(sender=type(user), request=request, user=user)
        return Response(serializer.validated_data, status=200)


class TokenRefresh(TokenRefreshView):
    @extend_schema(
        operation_id="auth_token_refresh",
        summary="Refresh an access token",
        description="Exchange a refresh token (valid one day) for a new access token. A refresh token stops "
                    "working at once when its user signs out, is deactivated or loses their last role.",
        responses={200: TokenRefreshSerializer, **error_responses(
            authenticated=False, _400="invalid", _401=("token_not_valid", "no_active_account"))},
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        refuse_unknown(request.data, writable_fields(serializer))
        try:
            serializer.is_valid(raise_exception=True)
        except TokenError as exc:  # expired, malformed or blacklisted (revoked)
            raise InvalidToken(exc.args[0]) from exc
        except ObjectDoesNotExist:  # the user was deleted since
            raise AuthenticationFailed("No active account found for the given token.",
                                       code="no_active_account") from None
        user_id = RefreshToken(str(serializer.initial_data["refresh"])).get("user_id")  # type: ignore[index, arg-type]
        user = get_user_model().objects.filter(pk=user_id).first()
        if user is not None:
            signins.token_refresh_record(user=user, request=request)
        return Response(serializer.validated_data, status=200)


class SignOut(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="auth_sign_out",
        summary="Sign out everywhere",
        description="Revoke every token of the calling user (refresh tokens are blacklisted, access tokens "
                    "refused) and close their websockets.",
        request=None,
        responses={200: inline_serializer("SignOutResult", {"refresh_tokens_revoked": serializers.IntegerField()}),
                   # a malformed Authorization header is named as such (schemathesis sends one here)
                   **error_responses(_401=("bad_authorization_header", "user_inactive"))},
    )
    def post(self, request: Request) -> Response:
        revoked = tokens_revoke(user=request.user, reason="signed_out", actor=Actor.user(request.user),
                                kind=AuditKind.SIGNED_OUT,
                                detail={"entrance": "api", "address": signins.client_address(request)})
        return Response({"refresh_tokens_revoked": revoked})
