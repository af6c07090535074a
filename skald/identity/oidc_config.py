"""The identity provider profile: ``SKALD_OIDC_*``, all of the required ones or none.

Read at first use from ``settings.SKALD_OIDC_ENV``; a partial profile fails the ``skald.E010``
system check, so the server refuses to start (like the GDL provider profile). The provider's
endpoints come from its discovery document, fetched once per process at the first sign-in.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from django.conf import settings

from loop.providers.netguard import IPNetwork, parse_allow_cidrs

if TYPE_CHECKING:
    from loop.providers.guarded_http import OutboundPolicy

REQUIRED = ("SKALD_OIDC_ISSUER", "SKALD_OIDC_CLIENT_ID", "SKALD_OIDC_CLIENT_SECRET")
OPTIONAL = ("SKALD_OIDC_AUDIENCE", "SKALD_OIDC_GROUPS_CLAIM", "SKALD_OIDC_SCOPES", "SKALD_OIDC_PROVIDER_NAME",
            "SKALD_OIDC_TIMEOUT_SECONDS", "SKALD_OIDC_ALLOW_CIDRS", "SKALD_OIDC_CA_FILE")


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str
    audience: str  # the ``aud`` an API bearer token must carry
    groups_claim: str
    scopes: str
    provider_name: str
    timeout: float
    # Outbound rules for every fetch from the provider (loop.providers.guarded_http): networks the
    # SSRF screen admits (a provider on loopback or a private range), and an extra CA bundle.
    allow_cidrs: tuple[IPNetwork, ...] = ()
    ca_file: str = ""

    def outbound(self) -> OutboundPolicy:
        """The guarded client's policy for this provider."""
        from loop.providers.guarded_http import OutboundPolicy

        return OutboundPolicy(allow_cidrs=self.allow_cidrs, ca_file=self.ca_file, timeout=self.timeout)


class OidcProfileError(ValueError):
    """The ``SKALD_OIDC_*`` variables are partial or malformed."""


def _parse(env: dict[str, str]) -> OidcConfig | None:
    present = [name for name in REQUIRED if env.get(name, "").strip()]
    unknown = sorted(set(env) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise OidcProfileError(f"unknown variable(s) {', '.join(unknown)}")
    if not present:
        extra = [name for name in OPTIONAL if env.get(name, "").strip()]
        if extra:
            raise OidcProfileError(f"{', '.join(extra)} set without {', '.join(REQUIRED)}")
        return None
    missing = [name for name in REQUIRED if name not in present]
    if missing:
        raise OidcProfileError(f"missing {', '.join(missing)}")
    issuer = env["SKALD_OIDC_ISSUER"].strip().rstrip("/")
    if not issuer.startswith(("https://", "http://127.0.0.1", "http://localhost")):
        raise OidcProfileError("SKALD_OIDC_ISSUER must be an https:// URL (http only on loopback)")
    try:
        timeout = float(env.get("SKALD_OIDC_TIMEOUT_SECONDS") or 10)
    except ValueError:
        raise OidcProfileError("SKALD_OIDC_TIMEOUT_SECONDS must be a number") from None
    try:
        allow_cidrs = parse_allow_cidrs(env.get("SKALD_OIDC_ALLOW_CIDRS") or "")
    except ValueError as exc:
        raise OidcProfileError(f"SKALD_OIDC_ALLOW_CIDRS: {exc}") from None
    client_id = env["SKALD_OIDC_CLIENT_ID"].strip()
    return OidcConfig(
        issuer=issuer, client_id=client_id, client_secret=env["SKALD_OIDC_CLIENT_SECRET"].strip(),
        audience=(env.get("SKALD_OIDC_AUDIENCE") or client_id).strip(),
        groups_claim=(env.get("SKALD_OIDC_GROUPS_CLAIM") or "groups").strip(),
        scopes=(env.get("SKALD_OIDC_SCOPES") or "openid email profile").strip(),
        provider_name=(env.get("SKALD_OIDC_PROVIDER_NAME") or "single sign-on").strip(), timeout=timeout,
        allow_cidrs=allow_cidrs, ca_file=(env.get("SKALD_OIDC_CA_FILE") or "").strip())


def oidc_error() -> str:
    """Why the profile is invalid, or "" when it is complete or absent."""
    try:
        _parse(dict(settings.SKALD_OIDC_ENV))
    except OidcProfileError as exc:
        return str(exc)
    return ""


def oidc_config() -> OidcConfig | None:
    """The profile, or ``None`` when single sign-on is not configured (or the profile is invalid:
    the system check has already refused to start in that case)."""
    try:
        return _parse(dict(settings.SKALD_OIDC_ENV))
    except OidcProfileError:
        return None


_discovery_lock = threading.Lock()


@cache
def _discover(config: OidcConfig) -> dict[str, Any]:
    issuer = config.issuer
    document = provider_get_json(config, f"{issuer}/.well-known/openid-configuration")
    if str(document.get("issuer", "")).rstrip("/") != issuer:
        raise OidcProfileError(f"the discovery document names issuer {document.get('issuer')!r}, not {issuer!r}")
    for name in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri"):
        if not document.get(name):
            raise OidcProfileError(f"the discovery document has no {name}")
    return dict(document)


def discovery(config: OidcConfig) -> dict[str, Any]:
    """The provider's discovery document (fetched once per process and issuer)."""
    with _discovery_lock:
        return _discover(config)


def provider_get_json(config: OidcConfig, url: str) -> dict[str, Any]:
    """GET a JSON object from the provider through the guarded client (SSRF screen, pinned address,
    no redirects, timeouts, CA settings).

    Raises:
        OidcProfileError: the fetch was refused or failed, or the answer is not a JSON object.
    """
    # Imported here, not at the top: httpx imports click and rich with itself (about 0.2 s), and
    # this module loads in every process (the system checks) while only OIDC fetches need it.
    from loop.errors import ProviderError
    from loop.providers.guarded_http import guarded_request

    try:
        response = guarded_request("GET", url, policy=config.outbound(), headers={"Accept": "application/json"})
    except ProviderError as exc:
        raise OidcProfileError(f"the identity provider could not be reached: {exc} ({exc.code})") from None
    if response.status_code != 200:
        raise OidcProfileError(f"the identity provider answered {response.status_code}")
    try:
        document = response.json()
    except ValueError:
        raise OidcProfileError("the identity provider's answer is not JSON") from None
    if not isinstance(document, dict):
        raise OidcProfileError("the identity provider's answer is not a JSON object")
    return document


def discovery_forget() -> None:
    _discover.cache_clear()
