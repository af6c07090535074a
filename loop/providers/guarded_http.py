"""The outbound HTTP chokepoint for what Skald fetches by itself, under the provider egress's rules.

The model provider streams through :mod:`loop.providers.openai_compat`; everything else Skald asks a
server for (an identity provider's discovery document, its keys, its token and user-info endpoints)
goes through :func:`guarded_request`, with the same rules (:mod:`loop.providers.netguard`):

- the URL is parsed strictly: ``https://`` only, or ``http://`` to an address that screens as
  loopback (a development identity provider), no userinfo, query or fragment;
- the host is resolved once, every answer screened (private, loopback, link-local and metadata
  addresses refused unless the caller's CIDR allow-list admits them), and the connection pinned to
  the screened address while TLS (SNI, certificate check) and ``Host`` keep the real name;
- no redirects, no proxy or CA settings from the environment, bounded timeouts, the certifi bundle
  plus an operator CA file.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import certifi
import httpx

from loop.errors import ProviderError
from loop.providers.netguard import (
    IPNetwork,
    Resolver,
    SystemResolver,
    parse_endpoint,
    resolve_and_screen,
)

_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@dataclass(frozen=True)
class OutboundPolicy:
    """Where a caller may reach and how long it waits.

    Attributes:
        allow_cidrs: networks admitted although the screen refuses them (loopback for a local
            identity provider, a private range for an internal one).
        ca_file: an operator CA bundle trusted besides certifi's.
        timeout: seconds for connect, each read, write and the pool.
        resolver: DNS for the screen; tests inject a scripted one.
    """

    allow_cidrs: Sequence[IPNetwork] = ()
    ca_file: str = ""
    timeout: float = 10.0
    resolver: Resolver = field(default_factory=SystemResolver)


def guarded_request(method: str, url: str, *, policy: OutboundPolicy, headers: Mapping[str, str] | None = None,
                    data: Mapping[str, Any] | None = None, content: bytes | None = None,
                    query: bool = False) -> httpx.Response:
    """Send one request under ``policy`` and return the whole response (read, closed). ``data`` is
    sent form-encoded, ``content`` as the exact body bytes (a signed webhook); ``query`` admits a
    query string in ``url`` (a receiver whose URL carries its own signature).

    Raises:
        ProviderError: ``provider_url_invalid``, ``provider_ssrf_refused``, ``provider_dns_failed``,
            ``provider_redirect_refused`` (a 3xx is never followed), ``provider_tls`` or
            ``provider_transport``; the message never echoes the URL.
    """
    plain = url[:7].lower() == "http://"
    endpoint = parse_endpoint("https://" + url[7:] if plain else url, query=query)
    pinned = resolve_and_screen(endpoint.host, endpoint.port, policy.resolver, policy.allow_cidrs)
    address = ipaddress.ip_address(pinned)
    if plain and not any(address in network for network in _LOOPBACK):
        raise ProviderError("plain http:// is accepted only to a loopback address", code="provider_url_invalid")
    shown = f"[{pinned}]" if isinstance(address, ipaddress.IPv6Address) else pinned
    port = "" if endpoint.port == (80 if plain else 443) else f":{endpoint.port}"
    target = f"{'http' if plain else 'https'}://{shown}{port}{endpoint.path or '/'}"
    if endpoint.query:
        target += f"?{endpoint.query}"
    host_header = endpoint.host_header if not plain or endpoint.port == 443 else \
        (f"{endpoint.host}:{endpoint.port}" if endpoint.port != 80 else endpoint.host)
    transport = httpx.HTTPTransport(verify=ssl_context(policy.ca_file), retries=0, trust_env=False)
    with httpx.Client(transport=transport, trust_env=False, follow_redirects=False,
                      timeout=httpx.Timeout(policy.timeout)) as client:
        try:
            response = client.request(method, target, headers={**(headers or {}), "Host": host_header},
                                      data=dict(data) if data is not None else None, content=content,
                                      extensions={} if plain else {"sni_hostname": endpoint.host})
        except httpx.HTTPError as exc:
            code = "provider_tls" if isinstance(exc.__cause__ or exc.__context__, ssl.SSLError) else \
                "provider_transport"
            raise ProviderError(f"the request failed ({type(exc).__name__})", code=code) from None
    if response.is_redirect:
        raise ProviderError(f"the server answered a redirect ({response.status_code}); not followed",
                            code="provider_redirect_refused")
    return response


@lru_cache(maxsize=8)
def ssl_context(ca_file: str = "") -> ssl.SSLContext:
    """certifi's bundle plus an operator CA file, built once per file (the provider adapter's too).

    Raises:
        ProviderError: ``provider_tls`` when the CA file cannot be loaded.
    """
    context = ssl.create_default_context(cafile=certifi.where())
    if ca_file:
        try:
            context.load_verify_locations(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ProviderError(f"the CA file cannot be loaded ({type(exc).__name__})", code="provider_tls") from None
    return context
