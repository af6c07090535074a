"""SSRF screening with DNS pinning for the provider egress (SPEC L7).

The HTTP adapter may only reach a globally routable address, unless an operator CIDR allow-list
(``BRAIN_GDL_PROVIDER_ALLOW_CIDRS``) admits it. Screening is fail-closed at every step:

* the URL is parsed with a strict parser of our own, so the parser we check and the parser that
  connects can never disagree about the host (``https://evil@127.0.0.1``, ``\\``, ``#@``, ...);
* a host is either a canonical IP literal or a valid DNS name; numeric look-alikes (``2130706433``,
  ``0x7f000001``, ``0177.0.0.1``, ``127.1``) are decoded the way lenient parsers would and refused;
* every resolved address must pass (one private answer refuses the lot), and the caller connects to
  the one pinned address returned here, so a DNS answer that changes after the check is never used.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from loop.errors import ProviderError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SSRF_REFUSED = "provider_ssrf_refused"
URL_INVALID = "provider_url_invalid"
DNS_FAILED = "provider_dns_failed"

_net4 = ipaddress.IPv4Network
_net6 = ipaddress.IPv6Network

# Cloud metadata and host-agent endpoints: named first so the refusal says what was hit.
# 168.63.129.16 (Azure wireserver) is a *public* address, so only this list catches it.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle IMDS
        "169.254.169.253",  # AWS VPC DNS
        "169.254.169.123",  # AWS time sync
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
        "168.63.129.16",  # Azure wireserver
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::253",  # AWS DNS over IPv6
        "fd00:ec2::123",  # AWS time sync over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
    )
)

_REFUSED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_net4("0.0.0.0/8"), "unspecified"),
    (_net4("10.0.0.0/8"), "private"),
    (_net4("100.64.0.0/10"), "shared address space (CGNAT)"),
    (_net4("127.0.0.0/8"), "loopback"),
    (_net4("169.254.0.0/16"), "link-local"),
    (_net4("172.16.0.0/12"), "private"),
    (_net4("192.0.0.0/24"), "IETF protocol assignment"),
    (_net4("192.0.2.0/24"), "documentation"),
    (_net4("192.88.99.0/24"), "6to4 relay anycast"),
    (_net4("192.168.0.0/16"), "private"),
    (_net4("198.18.0.0/15"), "benchmarking"),
    (_net4("198.51.100.0/24"), "documentation"),
    (_net4("203.0.113.0/24"), "documentation"),
    (_net4("224.0.0.0/4"), "multicast"),
    (_net4("255.255.255.255/32"), "broadcast"),
    (_net4("240.0.0.0/4"), "reserved"),
)

# IPv6 ranges refused outright. Deprecated or non-global embeddings (IPv4-compatible, 6to4,
# Teredo, local-use NAT64) are refused whatever they embed; their payload is decoded first only to
# name the refusal.
_REFUSED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_net6("::/128"), "unspecified"),
    (_net6("::1/128"), "loopback"),
    (_net6("::/96"), "IPv4-compatible (deprecated)"),
    (_net6("64:ff9b:1::/48"), "local-use NAT64"),
    (_net6("100::/64"), "discard-only"),
    (_net6("2001::/32"), "Teredo"),
    (_net6("2001:db8::/32"), "documentation"),
    (_net6("2002::/16"), "6to4 (deprecated)"),
    (_net6("3fff::/20"), "documentation"),
    (_net6("fc00::/7"), "unique local (private)"),
    (_net6("fe80::/10"), "link-local"),
    (_net6("fec0::/10"), "site-local (deprecated)"),
    (_net6("ff00::/8"), "multicast"),
)

_NAT64_WKP = _net6("64:ff9b::/96")
_NAT64_LOCAL = _net6("64:ff9b:1::/48")
_COMPAT = _net6("::/96")

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")
_NUMERIC_LABEL = re.compile(r"(?:[0-9]+|0x[0-9a-f]*)\Z")
_PORT = re.compile(r"[1-9][0-9]{0,4}\Z")
_PATH = re.compile(r"(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*\Z")
_QUERY = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@%/?-]+\Z")  # RFC 3986 query characters, not empty


def _refuse(reason: str) -> ProviderError:
    # Never name the host or the address: the message may travel into outcomes users can read.
    return ProviderError(f"provider address refused: {reason}", code=SSRF_REFUSED)


def _invalid(reason: str) -> ProviderError:
    return ProviderError(f"provider URL refused: {reason}", code=URL_INVALID)


# --- address screening (pure) -----------------------------------------------------------------


def refusal_reason(ip: IPAddress) -> str | None:
    """Why ``ip`` may not be reached without an allow-list entry, or None when it is public.

    Args:
        ip: the address to judge.

    Returns:
        A short label such as ``"loopback"`` or ``"6to4 (deprecated) embedding private"``.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return _v4_reason(ip)
    return _v6_reason(ip)


def _v4_reason(ip: ipaddress.IPv4Address) -> str | None:
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    for network, label in _REFUSED_V4:
        if ip in network:
            return label
    # Backstop for anything the table misses (the stdlib tracks the IANA special registry).
    if not ip.is_global or ip.is_multicast or ip.is_reserved:
        return "not globally routable"
    return None


def _v6_reason(ip: ipaddress.IPv6Address) -> str | None:
    if ip.scope_id:
        return "zone id"
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    if ip.ipv4_mapped is not None:
        inner = _v4_reason(ip.ipv4_mapped)
        return f"IPv4-mapped {inner}" if inner else None
    if ip in _NAT64_WKP:
        # The well-known NAT64 prefix is how IPv6-only hosts reach public IPv4 (DNS64): judge the
        # embedded address only.
        inner = _v4_reason(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        return f"NAT64 embedding {inner}" if inner else None
    for label, embedded in _embedded_v4(ip):
        inner = _v4_reason(embedded)
        if inner:
            return f"{label} embedding {inner}"
    for network, label in _REFUSED_V6:
        if ip in network:
            return label
    if not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_site_local:
        return "not globally routable"
    return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> Iterable[tuple[str, ipaddress.IPv4Address]]:
    """Every IPv4 address a transition mechanism could route ``ip`` to."""
    value = int(ip)
    if ip in _COMPAT and value > 1:
        yield "IPv4-compatible", ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if ip in _NAT64_LOCAL:
        yield "local-use NAT64", ipaddress.IPv4Address(value & 0xFFFFFFFF)
        # RFC 6052 layout for a /48 prefix: octets 1-2 in bits 48-63, octets 3-4 in bits 72-87.
        high = (value >> 64) & 0xFFFF
        low = (value >> 40) & 0xFFFF
        yield "local-use NAT64", ipaddress.IPv4Address((high << 16) | low)
    if ip.sixtofour is not None:
        yield "6to4", ip.sixtofour
    if ip.teredo is not None:
        server, client = ip.teredo
        yield "Teredo server", server
        yield "Teredo client", client


def _canonical(ip: IPAddress) -> IPAddress:
    # An IPv4-mapped address *is* the IPv4 address on a dual-stack socket.
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None and not ip.scope_id:
        return ip.ipv4_mapped
    return ip


def screen_address(ip: IPAddress | str, allow: Sequence[IPNetwork] = ()) -> None:
    """Refuse an address the provider egress must not reach.

    Args:
        ip: an address object, or its strict textual form (zone ids are refused).
        allow: operator networks that admit an address despite its range.

    Raises:
        ProviderError: ``provider_ssrf_refused`` naming the range, never the address.
    """
    if isinstance(ip, str):
        ip = _parse_resolved(ip)
    canonical = _canonical(ip)
    if any(canonical in network for network in allow):
        return
    reason = refusal_reason(canonical)
    if reason is not None:
        raise _refuse(reason)


def _parse_resolved(text: str) -> IPAddress:
    if "%" in text:
        raise _refuse("zone id")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise _refuse("resolver returned something that is not an address") from None


# --- strict host and URL parsing --------------------------------------------------------------


def parse_host(host: str) -> IPAddress | str:
    """Parse a URL host strictly: a canonical IP literal or a lower-cased DNS name.

    A host whose last label is numeric is treated as an IPv4 literal, the way browsers and
    ``inet_aton`` do; anything but the canonical dotted quad is refused, as SSRF when the lenient
    reading is a refused address.

    Raises:
        ProviderError: ``provider_url_invalid`` or ``provider_ssrf_refused``.
    """
    if not host or not host.isascii() or not host.isprintable() or len(host) > 253:
        raise _invalid("host is empty, too long or not plain ASCII")
    if host.startswith("[") or ":" in host:
        return _parse_v6_literal(host)
    name = host.lower()
    labels = name.split(".")
    if _NUMERIC_LABEL.match(labels[-1]) or (labels[-1] == "" and len(labels) > 1 and _NUMERIC_LABEL.match(labels[-2])):
        return _parse_v4_literal(name)
    if not all(_LABEL.match(label) for label in labels):
        # Also refuses a trailing dot: certificates and Host headers never carry one.
        raise _invalid("host is not a valid DNS name")
    return name


def _parse_v6_literal(host: str) -> ipaddress.IPv6Address:
    inner = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if "%" in inner or "[" in inner or "]" in inner:
        raise _invalid("IPv6 literal with a zone id or stray brackets")
    try:
        return ipaddress.IPv6Address(inner)
    except ValueError:
        raise _invalid("malformed IPv6 literal") from None


def _parse_v4_literal(name: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(name)
    except ValueError:
        pass
    lenient = _lenient_ipv4(name)
    if lenient is not None and refusal_reason(lenient) is not None:
        raise _refuse(f"non-canonical IPv4 literal for a {refusal_reason(lenient)} address")
    raise _invalid("non-canonical IPv4 literal")


def _lenient_ipv4(name: str) -> ipaddress.IPv4Address | None:
    """The WHATWG / ``inet_aton`` reading: 1-4 parts, each decimal, octal (0...) or hex (0x...)."""
    parts = name.split(".")
    if parts and parts[-1] == "":
        parts.pop()
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        try:
            if part[:2] in ("0x", "0X"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part[1:], 8))
            else:
                numbers.append(int(part, 10))
        except ValueError:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A strictly parsed ``https://`` base URL.

    Attributes:
        host: lower-cased DNS name or compressed IP text (no brackets).
        port: the TCP port (443 when absent).
        path: the base path without a trailing slash (``""`` or ``"/v1"``).
        ip: the literal address when the host is one, else None.
        query: the query string (without ``?``), only where the caller admitted one.
    """

    host: str
    port: int
    path: str
    ip: IPAddress | None = None
    query: str = ""

    @property
    def host_header(self) -> str:
        """The ``Host`` header value: the original name, bracketed for IPv6, port when not 443."""
        shown = f"[{self.host}]" if isinstance(self.ip, ipaddress.IPv6Address) else self.host
        return shown if self.port == 443 else f"{shown}:{self.port}"


def parse_endpoint(url: str, *, query: bool = False) -> Endpoint:
    """Parse an ``https://host[:port][/path]`` URL; anything else is refused.

    Refused: other schemes, userinfo, query (unless ``query``: a receiver whose URL carries its
    signature, such as a chat workflow's), fragment, backslashes, whitespace, control or non-ASCII
    characters, percent-encoding in the host, ports outside 1-65535 or with leading zeros.

    Raises:
        ProviderError: ``provider_url_invalid`` (or ``provider_ssrf_refused`` for a disguised
            numeric literal); the message never echoes the URL.
    """
    if not url.isascii() or not url.isprintable() or " " in url or "\\" in url:
        raise _invalid("URL contains whitespace, control, backslash or non-ASCII characters")
    if url[:8].lower() != "https://":
        raise _invalid("only https:// URLs are accepted")
    rest, _, asked = url[8:].partition("?")
    if "#" in url or (asked and not query) or (query and "?" in url and not _QUERY.match(asked)):
        raise _invalid("query and fragment are not accepted" if not query else "malformed query or a fragment")
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in authority:
        raise _invalid("userinfo is not accepted")
    host, port = _split_authority(authority)
    if not _PATH.match(path):
        raise _invalid("malformed path")
    parsed = parse_host(host)
    if isinstance(parsed, str):
        return Endpoint(host=parsed, port=port, path=path.rstrip("/"), query=asked)
    return Endpoint(host=parsed.compressed, port=port, path=path.rstrip("/"), ip=parsed, query=asked)


def _split_authority(authority: str) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _invalid("unterminated IPv6 literal")
        host, tail = authority[: end + 1], authority[end + 1 :]
        if tail and not tail.startswith(":"):
            raise _invalid("junk after the IPv6 literal")
        port_text = tail[1:] if tail else None
    elif authority.count(":") > 1:
        raise _invalid("IPv6 literals must be bracketed")
    else:
        host, _, port_text = authority.partition(":")
        port_text = port_text if ":" in authority else None
    if port_text is None:
        return host, 443
    if not _PORT.match(port_text) or int(port_text) > 65535:
        raise _invalid("port must be 1-65535 without leading zeros")
    return host, int(port_text)


# --- resolution and pinning -------------------------------------------------------------------


@runtime_checkable
class Resolver(Protocol):
    """Resolves a DNS name to IP address strings (tests inject a scripted one)."""

    def resolve(self, host: str, port: int) -> list[str]:
        """All addresses ``host`` resolves to, in preference order."""
        ...


class SystemResolver:
    """The operating system's resolver (``socket.getaddrinfo``), TCP answers only."""

    def resolve(self, host: str, port: int) -> list[str]:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            raise ProviderError(
                f"could not resolve the provider host ({type(exc).__name__})", code=DNS_FAILED
            ) from None
        seen: dict[str, None] = {}
        for _family, _type, _proto, _canon, sockaddr in infos:
            seen.setdefault(str(sockaddr[0]), None)
        return list(seen)

    def __repr__(self) -> str:
        return "SystemResolver()"


def resolve_and_screen(url_host: str, port: int, resolver: Resolver, allow: Sequence[IPNetwork] = ()) -> str:
    """Resolve ``url_host`` once, screen every answer, and return the one address to connect to.

    Args:
        url_host: the host from the URL (bracketed or bare IPv6 literals are accepted).
        port: the TCP port, passed to the resolver.
        resolver: where DNS answers come from.
        allow: operator networks that admit otherwise refused addresses.

    Returns:
        The pinned IP address text (compressed form). Connect to exactly this address.

    Raises:
        ProviderError: ``provider_url_invalid``, ``provider_ssrf_refused`` (any answer refused) or
            ``provider_dns_failed`` (no answer).
    """
    parsed = parse_host(url_host)
    if not isinstance(parsed, str):
        screen_address(parsed, allow)
        return parsed.compressed
    answers = resolver.resolve(parsed, port)
    if not answers:
        raise ProviderError("the provider host resolved to no address", code=DNS_FAILED)
    addresses = [_parse_resolved(answer) for answer in answers]
    for address in addresses:
        screen_address(address, allow)  # fail-closed: one refused answer refuses the host
    return addresses[0].compressed


def parse_allow_cidrs(text: str) -> tuple[IPNetwork, ...]:
    """Parse a comma-separated CIDR list (blank entries ignored; host bits must be zero).

    Raises:
        ValueError: naming the position of the first bad entry, never its text.
    """
    networks: list[IPNetwork] = []
    for position, raw in enumerate(text.split(","), start=1):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=True))
        except ValueError:
            raise ValueError(f"entry {position} is not a valid CIDR") from None
    return tuple(networks)


class ScreenedEgress:
    """One feature's outbound screen over its own CIDR setting (``SKALD_MCP_ALLOW_CIDRS``,
    ``SKALD_NOTIFY_ALLOW_CIDRS``, ...): the resolver its look-ups use (tests script DNS with
    :meth:`set_resolver`) and the networks the setting admits, read again at each use.

    Args:
        cidrs: reads the setting's text.
        invalid: the feature's error for a setting that does not parse, given why.
    """

    def __init__(self, cidrs: Callable[[], str], invalid: Callable[[str], Exception]) -> None:
        self._cidrs = cidrs
        self._invalid = invalid
        self.resolver: Resolver = SystemResolver()

    def set_resolver(self, resolver: Resolver | None) -> None:
        """Tests script DNS here; None restores the system's."""
        self.resolver = resolver or SystemResolver()

    def allow_cidrs(self) -> tuple[IPNetwork, ...]:
        """Raises: the feature's error (``invalid``) when the setting does not parse."""
        try:
            return parse_allow_cidrs(self._cidrs() or "")
        except ValueError as exc:
            raise self._invalid(str(exc)) from None

    def screen(self, url_host: str, port: int) -> str:
        """:func:`resolve_and_screen` with this resolver and these networks."""
        return resolve_and_screen(url_host, port, self.resolver, self.allow_cidrs())
