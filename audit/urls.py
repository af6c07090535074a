from __future__ import annotations

from django.urls import path

from audit.api import ChainVerifyView

urlpatterns = [
    path("verify", ChainVerifyView.as_view(), name="audit-verify"),
]
