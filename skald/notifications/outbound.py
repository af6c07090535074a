"""Where notifications may go: every receiver URL passes the providers' SSRF screen, at save and
again at each send (:mod:`loop.providers.guarded_http`, pinned to the screened address, no
redirects). Private and loopback receivers need their range in ``SKALD_NOTIFY_ALLOW_CIDRS``."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from django.conf import settings

from loop.errors import ProviderError
from loop.providers.guarded_http import OutboundPolicy, guarded_request
from loop.providers.netguard import ScreenedEgress, parse_endpoint
from skald.core.errors import SkaldError


class NotifyConfigError(SkaldError):
    code = "notify_invalid"
    http_status = 400


egress = ScreenedEgress(
    lambda: settings.SKALD_NOTIFY_ALLOW_CIDRS,
    lambda why: NotifyConfigError(f"SKALD_NOTIFY_ALLOW_CIDRS: {why}", code="notify_allow_cidrs_invalid"))


def screen_url(url: str) -> None:
    """Refuse a receiver URL the screen refuses (the message never echoes the URL).

    Raises:
        NotifyConfigError: ``notify_url_invalid`` or ``notify_ssrf_refused``.
    """
    if not url or len(url) > 500:
        raise NotifyConfigError("target must be a URL of at most 500 characters", code="notify_url_invalid",
                                field="target")
    plain = url[:7].lower() == "http://"
    try:
        endpoint = parse_endpoint("https://" + url[7:] if plain else url, query=True)
        egress.screen(endpoint.host, endpoint.port)
    except ProviderError as exc:
        code = "notify_ssrf_refused" if exc.code == "provider_ssrf_refused" else "notify_url_invalid"
        raise NotifyConfigError(f"the URL is refused: {exc}", code=code, field="target") from None


def post(url: str, body: bytes, headers: Mapping[str, str]) -> httpx.Response:
    """POST ``body`` to a screened receiver.

    Raises:
        ProviderError: refused by the screen, or the transport failed (never echoing the URL).
    """
    policy = OutboundPolicy(allow_cidrs=egress.allow_cidrs(), timeout=float(settings.SKALD_NOTIFY_TIMEOUT_SECONDS),
                            resolver=egress.resolver)
    return guarded_request("POST", url, policy=policy, headers=headers, content=body, query=True)
