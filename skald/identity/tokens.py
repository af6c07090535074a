"""The API's JWTs: simplejwt's tokens with the user's token version, refused once it is revoked."""

from __future__ import annotations

from typing import Any

from drf_spectacular.contrib.rest_framework_simplejwt import SimpleJWTScheme
from rest_framework_simplejwt.authentication import JWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed
from rest_framework_simplejwt.serializers import TokenObtainPairSerializer
from rest_framework_simplejwt.tokens import RefreshToken, Token

from skald.identity.models import TokenRevocation

VERSION_CLAIM = "tv"


def token_version(user_id: Any) -> int:
    return TokenRevocation.objects.filter(user_id=user_id).values_list("version", flat=True).first() or 0


def token_is_current(token: Token | dict[str, Any], user_id: Any) -> bool:
    """Whether a validated token was issued under the user's current version (no revocation since)."""
    return int(token.get(VERSION_CLAIM, 0) or 0) >= token_version(user_id)


class VersionedRefreshToken(RefreshToken):
    """A refresh token (and the access tokens made from it) carrying the user's token version."""

    @classmethod
    def for_user(cls, user: Any) -> VersionedRefreshToken:
        token = super().for_user(user)
        token[VERSION_CLAIM] = token_version(user.pk)
        return token  # type: ignore[return-value]


class VersionedTokenObtainSerializer(TokenObtainPairSerializer):
    token_class = VersionedRefreshToken


class RevocableJWTAuthentication(JWTAuthentication):
    """simplejwt's bearer authentication, refusing a token issued before the user's last revocation."""

    def get_user(self, validated_token: Token) -> Any:
        user = super().get_user(validated_token)
        if not token_is_current(validated_token, user.pk):
            raise AuthenticationFailed("Token has been revoked.", code="token_not_valid")
        return user


class RevocableJWTScheme(SimpleJWTScheme):
    """The schema's bearer scheme for it: simplejwt's, unchanged."""

    target_class = "skald.identity.tokens.RevocableJWTAuthentication"
