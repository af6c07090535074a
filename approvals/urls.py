from __future__ import annotations

from django.urls import path

from approvals.rules.api import ExplainView, ToolListView

urlpatterns = [
    path("explain", ExplainView.as_view(), name="approval-explain"),
    path("tools", ToolListView.as_view(), name="approval-tools"),
]
