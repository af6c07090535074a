"""What makes a server's configuration acceptable, checked at save (and again at connect).

- stdio: ``argv[0]`` must be named, exactly, in ``SKALD_MCP_STDIO_ALLOWLIST`` (argv only, no shell;
  an empty list admits nothing).
- http: the URL passes the providers' SSRF screen (:mod:`loop.providers.netguard`): ``https://``,
  or ``http://`` to a loopback address; loopback, private, link-local and metadata addresses are
  refused unless ``SKALD_MCP_ALLOW_CIDRS`` admits them.
- secrets: ``secret_env`` / ``secret_headers`` name files; the values are read at connect time and
  never stored or shown.

Every refusal is a :class:`~skald.core.errors.SkaldError` with a stable code.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from loop.errors import ProviderError
from loop.providers.netguard import ScreenedEgress, parse_endpoint
from skald.core.errors import SkaldError

NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]|_(?!_)){0,23}$")  # no "__": it splits mcp__{server}__{tool}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class McpConfigError(SkaldError):
    code = "mcp_invalid"
    http_status = 400


egress = ScreenedEgress(
    lambda: settings.SKALD_MCP_ALLOW_CIDRS,
    lambda why: McpConfigError(f"SKALD_MCP_ALLOW_CIDRS: {why}", code="mcp_allow_cidrs_invalid"))


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise McpConfigError("name must be 1-24 lowercase letters, digits, '-' or single '_'",
                             code="mcp_name_invalid", field="name")
    return name


def check_argv(argv: Any) -> list[str]:
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a and "\x00" not in a for a in argv):
        raise McpConfigError("argv must be a non-empty list of non-empty strings", code="mcp_argv_invalid",
                             field="argv")
    if argv[0] not in settings.SKALD_MCP_STDIO_ALLOWLIST:
        raise McpConfigError("argv[0] is not in SKALD_MCP_STDIO_ALLOWLIST", code="mcp_program_not_allowed",
                             field="argv")
    return list(argv)


@dataclass(frozen=True)
class Screened:
    """A URL that passed the screen, and the one address to connect to."""

    url: str
    address: str


def screen_url(url: Any) -> Screened:
    """The SSRF screen, exactly as the providers' outbound requests pass it.

    Raises:
        McpConfigError: ``mcp_url_invalid`` or ``mcp_ssrf_refused`` (never echoing the URL).
    """
    if not isinstance(url, str) or not url or len(url) > 500:
        raise McpConfigError("url must be a string of at most 500 characters", code="mcp_url_invalid", field="url")
    plain = url[:7].lower() == "http://"
    try:
        endpoint = parse_endpoint("https://" + url[7:] if plain else url)
        address = egress.screen(endpoint.host, endpoint.port)
    except ProviderError as exc:
        code = "mcp_ssrf_refused" if exc.code == "provider_ssrf_refused" else "mcp_url_invalid"
        raise McpConfigError(f"the URL is refused: {exc}", code=code, field="url") from None
    if plain and not any(ipaddress.ip_address(address) in net for net in _LOOPBACK):
        raise McpConfigError("plain http:// is accepted only to a loopback address", code="mcp_url_invalid",
                             field="url")
    return Screened(url=url, address=address)


def check_secret_files(mapping: Any, *, field: str, header: bool) -> dict[str, str]:
    if not isinstance(mapping, Mapping):
        raise McpConfigError(f"{field} must be an object of name -> file path", code="mcp_secret_invalid", field=field)
    pattern = HEADER_NAME if header else ENV_NAME
    checked: dict[str, str] = {}
    for key, path in mapping.items():
        if not isinstance(key, str) or not pattern.match(key) or not isinstance(path, str) or not path.startswith("/"):
            raise McpConfigError(f"{field}: each entry maps a name to an absolute file path",
                                 code="mcp_secret_invalid", field=field)
        checked[key] = path
    return checked


def read_secrets(mapping: Mapping[str, str]) -> dict[str, str]:
    """The values of ``*_FILE`` secrets, read now (a rotated file is picked up at the next connect).

    Raises:
        McpConfigError: ``mcp_secret_unreadable`` naming the entry, not the content.
    """
    values: dict[str, str] = {}
    for key, path in mapping.items():
        try:
            values[key] = Path(path).read_text().strip()
        except OSError as exc:
            raise McpConfigError(f"secret {key}: its file cannot be read ({type(exc).__name__})",
                                 code="mcp_secret_unreadable") from None
    return values


def check_agents(agents: Any) -> list[str]:
    if not isinstance(agents, list) or not all(isinstance(a, str) and a for a in agents):
        raise McpConfigError('agents must be a list of agent names, or ["*"]', code="mcp_agents_invalid",
                             field="agents")
    return list(dict.fromkeys(agents))
