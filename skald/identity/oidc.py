"""Single sign-on for the admin and the console: mozilla-django-oidc's relying party (authorization
code + PKCE + nonce), configured from the ``SKALD_OIDC_*`` profile and the provider's discovery.

The library does the protocol (state, nonce, PKCE, the code exchange, the ID token's signature
against the provider's JWKS, userinfo); Skald adds the checks it leaves out (the ID token's issuer,
audience and expiry), matches users by ``(issuer, sub)`` only, and applies the group mapping. The
library's three fetches (token, userinfo, key set) go through Skald's guarded client
(:mod:`loop.providers.guarded_http`: SSRF screen, pinned address, no redirects, timeouts, CA
settings) instead of ``requests``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView
from requests import RequestException

from skald.identity.oidc_config import OidcConfig, discovery, oidc_config
from skald.identity.provider_users import (
    provider_groups,
    provider_roles_apply,
    provider_user_create,
    provider_user_find,
)

logger = logging.getLogger(__name__)

METHOD = "oidc"


def _profile_setting(attr: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings, answered from the profile and the discovery document."""
    config = oidc_config()
    if config is None:
        return import_from_settings(attr, *default)
    fixed: dict[str, Any] = {
        "OIDC_RP_CLIENT_ID": config.client_id,
        "OIDC_RP_CLIENT_SECRET": config.client_secret,
        "OIDC_RP_SIGN_ALGO": "RS256",
        "OIDC_RP_SCOPES": config.scopes,
        "OIDC_USE_PKCE": True,
        "OIDC_USE_NONCE": True,
        "OIDC_TIMEOUT": config.timeout,
        "OIDC_CREATE_USER": True,
        "OIDC_STORE_ID_TOKEN": False,
    }
    if attr in fixed:
        return fixed[attr]
    endpoints = {"OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint", "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
                 "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint", "OIDC_OP_JWKS_ENDPOINT": "jwks_uri"}
    if attr in endpoints:
        return discovery(config)[endpoints[attr]]
    return import_from_settings(attr, *default)


def _require_config() -> OidcConfig:
    config = oidc_config()
    if config is None:
        raise Http404("Single sign-on is not configured.")
    return config


class ProviderBackend(OIDCAuthenticationBackend):
    """The authentication backend of the provider's callback (listed only when SSO is configured)."""

    get_settings = staticmethod(_profile_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library reads the endpoints in __init__: defer to the first sign-in (a backend is also
        # built for every password attempt, which must not fetch the discovery document).
        self.UserModel = __import__("django.contrib.auth", fromlist=["get_user_model"]).get_user_model()

    def _load(self) -> OidcConfig:
        config = _require_config()
        super().__init__()
        return config

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        if request is None or not request.GET.get("code") or not request.GET.get("state") \
                or not str(getattr(request, "path", "")).startswith("/oidc/"):
            return None
        self.config = self._load()
        try:
            return super().authenticate(request, **kwargs)
        except (SuspiciousOperation, RequestException):
            # a forged code, a foreign or forged ID token, a provider refusing the exchange: a failed
            # sign-in (audited by Django's user_login_failed), back to the login page
            logger.warning("single sign-on refused", exc_info=True)
            return None

    def verify_token(self, token: str, **kwargs: Any) -> Any:
        """The signature and nonce (the library), then issuer, audience and expiry."""
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if str(payload.get("iss", "")).rstrip("/") != self.config.issuer:
            raise SuspiciousOperation("ID token from another issuer")
        if self.config.client_id not in audiences:
            raise SuspiciousOperation("ID token for another audience")
        if int(payload.get("exp", 0)) <= time.time():
            raise SuspiciousOperation("ID token expired")
        return payload

    # --- the library's fetches, through the guarded client --------------------------------------

    def _fetch(self, method: str, url: str, *, headers: dict[str, str] | None = None,
               data: dict[str, Any] | None = None) -> Any:
        from loop.errors import ProviderError
        from loop.providers.guarded_http import guarded_request

        try:
            response = guarded_request(method, url, policy=self.config.outbound(), headers=headers, data=data)
        except ProviderError as exc:
            raise RequestException(f"the identity provider could not be reached ({exc.code})") from None
        if response.status_code != 200:
            raise RequestException(f"the identity provider answered {response.status_code}")
        return response

    def get_token(self, payload: dict[str, Any]) -> Any:
        """The code exchange (the client secret travels in the form body, as the library sends it)."""
        return self._fetch("POST", self.OIDC_OP_TOKEN_ENDPOINT, data=payload,
                           headers={"Accept": "application/json"}).json()

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        response = self._fetch("GET", self.OIDC_OP_USER_ENDPOINT, headers={"Authorization": f"Bearer {access_token}"})
        if response.headers.get("content-type", "").lower().startswith("application/jwt"):
            return self.verify_token(response.text)  # userinfo claims may come as a signed JWT
        return response.json()

    def retrieve_matching_jwk(self, token: str) -> Any:
        """The library's key choice (same kid and, when the key names one, the same alg)."""
        import jwt

        jwks = self._fetch("GET", self.OIDC_OP_JWKS_ENDPOINT, headers={"Accept": "application/json"}).json()
        header = jwt.get_unverified_header(token)
        matching = [key for key in jwks.get("keys", []) if key.get("kid") == str(header.get("kid"))
                    and ("alg" not in key or key["alg"] == str(header.get("alg")))]
        if not matching:
            raise SuspiciousOperation("Could not find a valid JWKS.")
        return jwt.PyJWK(matching[-1])

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        user = provider_user_find(issuer=self.config.issuer, subject=str(claims["sub"]))
        return self.UserModel.objects.filter(pk=user.pk) if user is not None else self.UserModel.objects.none()

    def create_user(self, claims: dict[str, Any]) -> Any:
        user = provider_user_create(issuer=self.config.issuer, subject=str(claims["sub"]), claims=claims)
        return self.update_user(user, claims)

    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        provider_roles_apply(user=user, groups=provider_groups(claims, self.config.groups_claim), method=METHOD)
        return user

    def get_user(self, user_id: Any) -> Any:
        """The session's user; a deactivated user's session ends at their next request."""
        return self.UserModel.objects.filter(pk=user_id, is_active=True).first()


class SignInStart(OIDCAuthenticationRequestView):
    """``/oidc/authenticate/?next=…``: to the provider's authorize endpoint (with PKCE and a nonce)."""

    get_settings = staticmethod(_profile_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # endpoints at the request, not at import
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        _require_config()
        self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        self.OIDC_RP_CLIENT_ID = self.get_settings("OIDC_RP_CLIENT_ID")
        return super().get(request)


class SignInCallback(OIDCAuthenticationCallbackView):
    """``/oidc/callback/``: the code comes back; the backend signs the user in (audited as ``oidc``)."""

    get_settings = staticmethod(_profile_setting)

    @property
    def failure_url(self) -> str:
        return f"{settings.LOGIN_URL}?sso=failed"

    def get(self, request: HttpRequest) -> HttpResponse:
        _require_config()
        request.skald_sign_in_method = METHOD  # type: ignore[attr-defined]
        return super().get(request)
