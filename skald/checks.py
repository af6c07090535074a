"""Cross-setting rules as Django system checks (ids ``skald.E0xx`` / ``skald.W0xx``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from skald import provider_config


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


@register()
def check_compaction_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    from loop.compaction.policy import CompactionPolicy
    from loop.errors import HarnessError

    try:
        CompactionPolicy().override(settings.SKALD_COMPACTION)
    except HarnessError as exc:
        return [Error(f"SKALD_COMPACTION is invalid: {exc}", id="skald.E005")]
    return []
