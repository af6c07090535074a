"""API bearer tokens from the identity provider, validated against its key set (PyJWT; the keys fetched
through the guarded client, :class:`ProviderKeys`).

A bearer token whose (unverified) ``iss`` is not the configured issuer is left to the next
authentication class (Skald's own JWTs), which refuses anything it did not sign. A token that
claims the issuer must then verify: signature by a key of the provider's JWKS, issuer, audience
(``SKALD_OIDC_AUDIENCE``, default the client id), expiry. The user is found by ``(issuer, sub)``
(created on first use) and their roles follow the token's groups claim like a browser sign-in.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import jwt
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from skald.identity.oidc_config import OidcConfig, OidcProfileError, discovery, oidc_config, provider_get_json
from skald.identity.provider_users import (
    provider_groups,
    provider_roles_apply,
    provider_user_create,
    provider_user_find,
)

ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


class ProviderKeys:
    """The provider's signing keys, fetched through the guarded client (never urllib), kept for five
    minutes and fetched again at once when a token names a key id the set does not hold (rotation)."""

    LIFESPAN = 300.0

    def __init__(self, uri: str, config: OidcConfig) -> None:
        self.uri, self.config = uri, config
        self._keys: jwt.PyJWKSet | None = None
        self._fetched = 0.0
        self._lock = threading.Lock()

    def signing_key(self, token: str) -> jwt.PyJWK:
        """The key that signed ``token``. Raises ``jwt.PyJWTError`` (``PyJWKClientError``) when none."""
        kid = jwt.get_unverified_header(token).get("kid")
        for refresh in (False, True):
            for key in self._key_set(refresh=refresh).keys:
                if kid is None or key.key_id == kid:
                    return key
        raise jwt.PyJWKClientError(f"the provider's key set has no key {kid!r}")

    def _key_set(self, *, refresh: bool) -> jwt.PyJWKSet:
        with self._lock:
            if refresh or self._keys is None or time.monotonic() - self._fetched > self.LIFESPAN:
                try:
                    self._keys = jwt.PyJWKSet.from_dict(provider_get_json(self.config, self.uri))
                except OidcProfileError as exc:
                    raise jwt.PyJWKClientConnectionError(str(exc)) from None
                self._fetched = time.monotonic()
            return self._keys


_clients: dict[str, ProviderKeys] = {}
_clients_lock = threading.Lock()


def _provider_keys(config: OidcConfig) -> ProviderKeys:
    uri = str(discovery(config)["jwks_uri"])
    with _clients_lock:
        keys = _clients.get(uri)
        if keys is None:
            keys = _clients[uri] = ProviderKeys(uri, config)
        return keys


def provider_token_claims(token: str, config: OidcConfig) -> dict[str, Any]:
    """The verified claims of a provider-issued token. Raises ``jwt.PyJWTError`` when it does not verify."""
    key = _provider_keys(config).signing_key(token)
    return jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=config.audience, issuer=config.issuer,
                      options={"require": ["exp", "iat", "iss", "sub", "aud"]}, leeway=30)


class ProviderBearerAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        config = oidc_config()
        if config is None:
            return None
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != b"bearer":
            return None
        token = parts[1].decode("latin-1")
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return None  # not a JWT at all: not ours
        if str(unverified.get("iss", "")).rstrip("/") != config.issuer:
            return None
        try:
            claims = provider_token_claims(token, config)
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"Provider token refused: {exc}", code="token_not_valid") from None
        user = provider_user_find(issuer=config.issuer, subject=str(claims["sub"])) \
            or provider_user_create(issuer=config.issuer, subject=str(claims["sub"]), claims=claims)
        if not user.is_active:
            raise AuthenticationFailed("User is inactive.", code="user_inactive")
        if config.groups_claim in claims:
            provider_roles_apply(user=user, groups=provider_groups(claims, config.groups_claim), method="bearer")
        return user, claims

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ProviderBearerScheme(OpenApiAuthenticationExtension):
    target_class = "skald.identity.bearer.ProviderBearerAuthentication"
    name = "providerBearer"  # the same header as Skald's own JWTs; listed as the alternative it is

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                "description": "An access token from the identity provider (when single sign-on is configured)."}
