"""Skald's admin site: its name, a home page per role and the live fragment the home re-reads.

The site is the default one (``skald.apps.SkaldAdminConfig``), so every ``admin.register`` in the
apps lands here. Pages only read: each panel comes from :mod:`skald.admin.home`, which asks the
selectors.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import SimpleTemplateResponse, TemplateResponse
from django.urls import URLPattern, URLResolver, path

from skald.admin import viewer_links
from skald.admin.login import SkaldAuthenticationForm

viewer_links.install()


class SkaldAdminSite(admin.AdminSite):
    site_header = "Skald"
    site_title = "Skald"
    index_title = "Home"
    site_url = "/"
    index_template = "admin/skald/index.html"
    login_form = SkaldAuthenticationForm

    def admin_view(self, view: Callable[..., Any], cacheable: bool = False) -> Any:
        """Every admin view renders inside its viewer's context, so a read-only foreign key links only
        where the viewer may follow (:mod:`skald.admin.viewer_links`)."""
        inner = super().admin_view(view, cacheable)

        @wraps(inner)
        def viewed(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            with viewer_links.viewing(request):
                response = inner(request, *args, **kwargs)
                if isinstance(response, SimpleTemplateResponse) and not response.is_rendered:
                    response.render()
                return response

        return viewed

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        from skald.admin.home import home_panels, live_topics_of

        panels = home_panels(request)
        return super().index(request, {"panels": panels, "live_topics": live_topics_of(panels),
                                       **(extra_context or {})})

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The password form, and "Sign in with …" when single sign-on is configured (admin and console)."""
        from skald.identity.oidc_config import oidc_config

        config = oidc_config()
        sso = {"sso_name": config.provider_name, "sso_failed": request.GET.get("sso") == "failed"} if config else {}
        return super().login(request, {**sso, **(extra_context or {})})

    def home_fragment(self, request: HttpRequest) -> HttpResponse:
        """The home's panels alone, for the page's live refresh."""
        from skald.admin.home import home_panels

        return TemplateResponse(request, "admin/skald/home_panels.html", {"panels": home_panels(request)})

    def get_urls(self) -> list[URLResolver | URLPattern]:
        own = [path("home/panels/", self.admin_view(self.home_fragment), name="skald_home_panels")]
        return own + super().get_urls()
