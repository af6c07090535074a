"""Read-only foreign keys link only where the viewer may follow (issue 35: an operator met 26 bare
403 pages, linked from a job's page to sessions, tool calls and users only an administrator opens).

Django's admin renders a read-only foreign key as a link to the related row's change page whoever
looks (``AdminReadonlyField.get_admin_url`` has no request). Skald's site records the viewer of
each admin view in a context variable (:func:`viewing`) and renders the page inside it; the link
is then kept where the viewer may open the row, points to the run when the row is a run's session
the viewer may open as a run, and is plain text otherwise. One rule for every admin page, so no
page links to a 403.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from loop.models import Session
from skald.core.admin import current_viewer, viewing

__all__ = ["readonly_link", "viewing"]

_django_admin_url = helpers.AdminReadonlyField.get_admin_url


def _may_open(request: HttpRequest, site: admin.AdminSite, obj: Any) -> bool:
    model = type(obj)
    return site.is_registered(model) and bool(site.get_model_admin(model).has_view_permission(request, obj))


def _run_of(request: HttpRequest, site: admin.AdminSite, obj: Any) -> str:
    """A run's session opens as the run, for whoever may open the run."""
    if not isinstance(obj, Session):
        return ""
    run = getattr(obj, "run", None)  # the reverse one-to-one: None when the session is not a run's
    if run is None or not _may_open(request, site, run):
        return ""
    try:
        return format_html('<a href="{}">{} (run #{})</a>', reverse("admin:skald_run_change", args=[run.pk],
                                                                    current_app=site.name), obj, run.pk)
    except NoReverseMatch:
        return ""


def readonly_link(field: helpers.AdminReadonlyField, remote_field: Any, remote_obj: Any) -> str:
    request = current_viewer()
    if field.model_admin is None:
        return str(remote_obj)
    site = field.model_admin.admin_site
    if request is not None and _may_open(request, site, remote_obj):
        return str(_django_admin_url(field, remote_field, remote_obj))
    if request is not None and (run_link := _run_of(request, site, remote_obj)):
        return run_link
    return str(remote_obj)


def install() -> None:
    """Called once by the admin site's module: every read-only foreign key goes through :func:`readonly_link`."""
    helpers.AdminReadonlyField.get_admin_url = readonly_link  # type: ignore[method-assign, assignment]
