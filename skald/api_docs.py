"""The API's Redoc page, served whole by the project: it loads nothing from outside (issues 13, 35).

Redoc's standalone bundle (from drf-spectacular-sidecar) renders an attribution image from
``cdn.redoc.ly`` whatever its options say. The page loads a copy of the bundle in which that address
names an inline empty image, and a Content-Security-Policy keeps anything else the bundle may ask
for on the project's own origin.
"""

from __future__ import annotations

from functools import cache

from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET
from drf_spectacular.views import SpectacularRedocView

SIDECAR_BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
OUTSIDE_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
EMPTY_IMAGE = "data:image/svg+xml,%3Csvg xmlns=%22http://www.w3.org/2000/svg%22/%3E"
# Workers: Redoc's search index runs in a blob: worker.
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' data:; font-src 'self' data:; "
                           "style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'; "
                           "worker-src 'self' blob:; connect-src 'self'")


@cache
def _bundle() -> bytes:
    path = finders.find(SIDECAR_BUNDLE)
    if not path:
        raise FileNotFoundError(SIDECAR_BUNDLE)
    with open(path, encoding="utf-8") as source:
        return source.read().replace(OUTSIDE_LOGO, EMPTY_IMAGE).encode()


@require_GET
@cache_control(public=True, max_age=86400)
def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """The sidecar's Redoc bundle with its one outside address made local."""
    return HttpResponse(_bundle(), content_type="text/javascript; charset=utf-8")


class OfflineRedocView(SpectacularRedocView):
    """drf-spectacular's Redoc page on the local bundle, under the policy above."""

    schema = None  # a page about the API, not an operation of it

    @staticmethod
    def _redoc_standalone() -> str:
        return reverse("redoc_bundle")

    def get(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        response = super().get(request, *args, **kwargs)
        response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response
