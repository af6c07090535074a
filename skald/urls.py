"""URL map: admin, probes, the REST API under /api/, workflow routes under /workflow/."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from skald import api_docs, views
from skald.api.auth import SignOut, TokenObtain, TokenRefresh
from skald.console import console

api_patterns: list[URLPattern | URLResolver] = [
    path("auth/token/", TokenObtain.as_view(), name="token_obtain_pair"),
    path("auth/token/refresh/", TokenRefresh.as_view(), name="token_refresh"),
    path("auth/sign-out/", SignOut.as_view(), name="sign_out"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("redoc/", api_docs.OfflineRedocView.as_view(url_name="schema", template_name="skald/redoc.html"),
         name="redoc"),
    path("", include("skald.api.urls")),
]

urlpatterns = [
    path("", views.landing, name="landing"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("assets/redoc.standalone.js", api_docs.redoc_bundle, name="redoc_bundle"),
    path("admin/", admin.site.urls),
    path("oidc/", include("mozilla_django_oidc.urls")),  # single sign-on (skald.identity.oidc)
    path("console/", console, name="console"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics_view, name="metrics"),
    path("api/", include(api_patterns)),
    path("workflow/", include("skald.workflow.urls")),
]

handler403 = "skald.views.permission_denied"
handler404 = "skald.views.api_not_found"
handler500 = "skald.views.server_error"
