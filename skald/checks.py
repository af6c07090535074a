"""Cross-setting rules as Django system checks (ids ``skald.E0xx`` / ``skald.W0xx``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from skald import provider_config
from skald.identity.oidc_config import REQUIRED, oidc_error


@register()
def check_provider_profile(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    provider_config.reset()
    if provider_config.provider_status() == "invalid":
        return [
            Error(
                "The GDL provider profile is partial or invalid: " + provider_config.provider_error(),
                hint="Set all four BRAIN_GDL_PROVIDER_* variables (BASE_URL, MODEL, SECRET_FILE, "
                "SECRET_ROOT) or none of them.",
                id="skald.E001",
            )
        ]
    return []


@register()
def check_identity_provider_profile(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    problem = oidc_error()
    if problem:
        return [Error(f"The identity provider profile is partial or invalid: {problem}.",
                      hint=f"Set all of {', '.join(REQUIRED)} or none of them (docs/identity.md).", id="skald.E010")]
    return []


@register(Tags.security, deploy=True)
def check_production_profile(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    problems: list[Error | Warning] = []
    if not settings.DEBUG:
        if not settings.DATABASE_URL.startswith(("postgres://", "postgresql://")):
            problems.append(
                Error("Production (SKALD_DEBUG=0) needs DATABASE_URL pointing to PostgreSQL.", id="skald.E002")
            )
        if not settings.REDIS_URL:
            problems.append(
                Error("Production (SKALD_DEBUG=0) needs REDIS_URL for channels and the task broker.",
                      id="skald.E003")
            )
        if not settings.SKALD_METRICS_TOKEN:
            problems.append(
                Warning(
                    "SKALD_METRICS_TOKEN is not set: /metrics must then be closed by a network rule.",
                    id="skald.W001",
                )
            )
    if not settings.SKALD_AUDIT_KEY and not settings.DEBUG:
        problems.append(
            Warning("SKALD_AUDIT_KEY is not set: exported chain heads are not signed.", id="skald.W002")
        )
    if not settings.SKALD_FOUR_EYES and not settings.DEBUG:
        problems.append(Warning(
            "SKALD_FOUR_EYES is off: an approver may approve a call their own session asked for.",
            hint="Set SKALD_FOUR_EYES=1 so another approver decides (the console's card says when a call is "
                 "the viewer's own either way).",
            id="skald.W009",
        ))
    return problems


@register()
def check_debug_with_a_server_database(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """A server database means a shared deployment; DEBUG there leaks settings and source in error
    pages and keeps every query in memory. SKALD_DEBUG defaults to on for the embedded profile."""
    if settings.DATABASE_URL and settings.DEBUG:
        return [
            Warning(
                "DATABASE_URL is set but SKALD_DEBUG is on (its embedded-profile default).",
                hint="Set SKALD_DEBUG=0 for any deployment that uses a database server.",
                id="skald.W003",
            )
        ]
    return []


@register()
def check_exec_allowlist(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    raw = settings.BRAIN_ENGINE_EXEC_ALLOWLIST
    bad = [item for item in raw.split(",") if item.strip() and any(c in item for c in " ;|&$`")]
    if bad:
        return [Error("BRAIN_ENGINE_EXEC_ALLOWLIST holds program names or paths only.", id="skald.E004")]
    return []


@register(Tags.security, deploy=True)
def check_proxy_settings(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """Behind a TLS proxy: who redirects plain HTTP, and which header says a request was HTTPS."""
    if settings.DEBUG:
        return []
    problems: list[Warning] = []
    if not settings.SECURE_SSL_REDIRECT and not settings.SKALD_PROXY_REDIRECTS_HTTP:
        problems.append(Warning(
            "SKALD_SSL_REDIRECT=0 and nothing says the proxy redirects plain HTTP: clients can use the "
            "API and the admin without TLS.",
            hint="Either keep SKALD_SSL_REDIRECT on (the default) and make the proxy overwrite "
            f"{settings.SKALD_PROXY_SSL_HEADER or 'X-Forwarded-Proto'}: https on every request it forwards, or "
            "let the proxy redirect HTTP to HTTPS itself and set SKALD_PROXY_REDIRECTS_HTTP=1 "
            "(docs/production.md, 'Behind a proxy').",
            id="skald.W005",
        ))
    if settings.SECURE_SSL_REDIRECT and settings.SECURE_PROXY_SSL_HEADER is None:
        problems.append(Warning(
            "SKALD_SSL_REDIRECT is on but SKALD_PROXY_SSL_HEADER is empty: behind a TLS proxy every "
            "request arrives as plain HTTP and is answered 301 to itself, forever.",
            hint="Set SKALD_PROXY_SSL_HEADER to the header your proxy overwrites with the client's "
            "scheme (X-Forwarded-Proto for nginx, HAProxy, Traefik and most load balancers).",
            id="skald.W006",
        ))
    return problems


@register(Tags.database)
def check_database_role(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Warning]:
    """The application must not connect as a PostgreSQL superuser: it would take the connection
    slots reserved for administrators and bypass every grant (docs/production.md creates a plain
    role). A database check: ``migrate`` and ``check --database default`` run it."""
    from django.db import DatabaseError, connections

    problems: list[Warning] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
                row = cursor.fetchone()
        except DatabaseError as exc:
            problems.append(Warning(f"Could not read the role of database {alias!r}: "
                                    f"{str(exc).strip().splitlines()[0]}", id="skald.W008"))
            continue
        if row and row[1]:
            problems.append(Warning(
                f"Database {alias!r}: the application connects to PostgreSQL as {row[0]!r}, a superuser.",
                hint="Create a role without SUPERUSER that owns the database (docs/production.md, 'Database "
                "role and pool') and name it in DATABASE_URL; superusers use the reserved connection "
                "slots and bypass every grant.",
                id="skald.W007",
            ))
    return problems
@register()
def check_compaction_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    from loop.compaction.policy import CompactionPolicy
    from loop.errors import HarnessError

    try:
        CompactionPolicy().override(settings.SKALD_COMPACTION)
    except HarnessError as exc:
        return [Error(f"SKALD_COMPACTION is invalid: {exc}", id="skald.E005")]
    return []


@register()
def check_exec_sandbox_mode(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    from skald.loop_adapters.sandbox import MODES

    if settings.SKALD_EXEC_SANDBOX not in MODES:
        return [Error(f"SKALD_EXEC_SANDBOX must be one of {', '.join(MODES)}.", id="skald.E012")]
    return []


@register(Tags.security, deploy=True)
def check_exec_sandbox(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Production runs commands confined (bubblewrap) or says out loud that it accepts them unconfined."""
    from skald.loop_adapters.sandbox import exec_confinement, unconfined_accepted

    if settings.DEBUG or exec_confinement() is not None or unconfined_accepted():
        return []
    return [Error(
        "No sandbox for execute_cmd on this machine (sandbox: unavailable): a command could read other "
        "sessions' files, var/, the database and the keys, and commands are refused.",
        hint="Install bubblewrap (apt-get install bubblewrap) and keep SKALD_EXEC_SANDBOX=auto, or accept "
        "unconfined commands with SKALD_EXEC_UNCONFINED_OK=1 (docs/production.md, 'Sandbox').",
        id="skald.E011",
    )]


@register()
def check_mcp_settings(app_configs: Any = None, **kwargs: Any) -> list[Error | Warning]:
    """MCP (docs/mcp.md): the CIDRs an http server may be in must parse; the stdio sandbox mode is
    auto or off; an allowlisted stdio program should be an absolute path (a bare name is looked up
    on each worker's PATH)."""
    from loop.providers.netguard import parse_allow_cidrs

    problems: list[Error | Warning] = []
    try:
        parse_allow_cidrs(settings.SKALD_MCP_ALLOW_CIDRS or "")
    except ValueError as exc:
        problems.append(Error(f"SKALD_MCP_ALLOW_CIDRS is invalid: {exc}", id="skald.E020"))
    if settings.SKALD_MCP_STDIO_SANDBOX not in ("auto", "off"):
        problems.append(Error("SKALD_MCP_STDIO_SANDBOX must be auto or off.", id="skald.E021"))
    relative = [p for p in settings.SKALD_MCP_STDIO_ALLOWLIST if not p.startswith("/")]
    if relative:
        problems.append(Warning(f"SKALD_MCP_STDIO_ALLOWLIST names programs by bare name ({', '.join(relative)}): "
                                "each worker resolves them on its own PATH.",
                                hint="Name each program by its absolute path.", id="skald.W020"))
    return problems


@register()
def check_notification_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Notifications (docs/notifications.md): the receivers' allowed CIDRs must parse."""
    from loop.providers.netguard import parse_allow_cidrs

    try:
        parse_allow_cidrs(settings.SKALD_NOTIFY_ALLOW_CIDRS or "")
    except ValueError as exc:
        return [Error(f"SKALD_NOTIFY_ALLOW_CIDRS is invalid: {exc}", id="skald.E030")]
    return []
