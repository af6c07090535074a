"""A link to a model's admin is shown only to a viewer that admin lets in."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import RequestFactory

from approvals.models import PendingApproval
from proposals.models import Proposal
from skald.core.admin import admin_may_view
from skald.models import Case
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def _request(user):
    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def test_it_follows_the_model_admins_view_permission() -> None:
    approver = make_user("bob", "approver")
    approver.is_staff = True
    approver.save()
    assert admin_may_view(_request(approver), admin.site, PendingApproval)
    assert not admin_may_view(_request(approver), admin.site, Proposal)


def test_a_model_the_site_does_not_show_is_never_linked() -> None:
    root = make_user("root", superuser=True)
    assert not admin_may_view(_request(root), admin.AdminSite(name="empty"), Case)
