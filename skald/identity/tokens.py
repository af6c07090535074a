"""The API's JWTs: simplejwt's tokens with the user's token version, refused once it is revoked."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, cast

from django.db.models import OuterRef, Subquery
from django.db.models.functions import Coalesce
from drf_spectacular.contrib.rest_framework_simplejwt import SimpleJWTScheme
from rest_framework_simplejwt.authentication import JWTAuthentication
from rest_framework_simplejwt.exceptions import AuthenticationFailed
from rest_framework_simplejwt.serializers import TokenObtainPairSerializer
from rest_framework_simplejwt.tokens import RefreshToken, Token

from skald.identity.models import TokenRevocation

VERSION_CLAIM = "tv"


def token_version(user_id: Any) -> int:
    return TokenRevocation.objects.filter(user_id=user_id).values_list("version", flat=True).first() or 0


def issued_under(token: Token | dict[str, Any], version: int) -> bool:
    """Whether a validated token was issued under ``version`` of its user's tokens or a later one."""
    return int(token.get(VERSION_CLAIM, 0) or 0) >= version


def token_is_current(token: Token | dict[str, Any], user_id: Any) -> bool:
    """Whether a validated token was issued under the user's current version (no revocation since)."""
    return issued_under(token, token_version(user_id))


class VersionedRefreshToken(RefreshToken):
    """A refresh token (and the access tokens made from it) carrying the user's token version."""

    @classmethod
    def for_user(cls, user: Any) -> VersionedRefreshToken:
        token = super().for_user(user)
        token[VERSION_CLAIM] = token_version(user.pk)
        return token  # type: ignore[return-value]


class VersionedTokenObtainSerializer(TokenObtainPairSerializer):
    token_class = VersionedRefreshToken


class _UsersWithTokenVersion:
    """What simplejwt's ``get_user`` reads as ``self.user_model``: the user model whose ``objects``
    also carry the user's token version, so a request authenticates in one query, not two."""

    def __init__(self, model: Any) -> None:
        self.DoesNotExist = model.DoesNotExist
        version = TokenRevocation.objects.filter(user_id=OuterRef("pk")).values("version")[:1]
        self.objects = model.objects.annotate(skald_token_version=Coalesce(Subquery(version), 0))


@lru_cache(maxsize=1)
def _users_with_token_version(model: Any) -> _UsersWithTokenVersion:
    # Built once per process: DRF makes an authenticator for every request, and composing the
    # annotated queryset cost more than the query it sends. Each look-up clones it.
    return _UsersWithTokenVersion(model)


class RevocableJWTAuthentication(JWTAuthentication):
    """simplejwt's bearer authentication, refusing a token issued before the user's last revocation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user_model = cast(Any, _users_with_token_version(self.user_model))

    def get_user(self, validated_token: Token) -> Any:
        user = super().get_user(validated_token)  # simplejwt's checks, through the annotated query
        if not issued_under(validated_token, user.skald_token_version):  # type: ignore[attr-defined]  # annotated above
            raise AuthenticationFailed("Token has been revoked.", code="token_not_valid")
        return user


class RevocableJWTScheme(SimpleJWTScheme):
    """The schema's bearer scheme for it: simplejwt's, unchanged."""

    target_class = "skald.identity.tokens.RevocableJWTAuthentication"
