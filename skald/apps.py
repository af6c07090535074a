from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class SkaldConfig(AppConfig):
    name = "skald"
    verbose_name = "Skald"

    def ready(self) -> None:
        from skald import checks, dbpool, tracing, wiring  # noqa: F401  (checks register themselves)

        wiring.install()
        dbpool.install()
        tracing.configure()  # OpenTelemetry only when an OTLP endpoint is configured


class SkaldAdminConfig(admin_apps.AdminConfig):
    """``django.contrib.admin`` with Skald's site as the default one (named in INSTALLED_APPS)."""

    default = False  # SkaldConfig stays this module's default app config

    default_site = "skald.admin.site.SkaldAdminSite"

    def ready(self) -> None:
        super().ready()  # every app's admin module, skald.admin's (which registers nothing) included
        from skald.admin import (  # noqa: F401  (each registers its pages)
            catalogue,
            identity,
            jobs,
            mcp,
            mcp_elicitations,
            notifications,
            store,
        )
