from __future__ import annotations

from django.urls import path

from skald.workflow import views

urlpatterns = [
    path("cases/<int:case_id>/gdl", views.gdl_launch, name="workflow-gdl"),
    path("runs/<int:run_id>/handoff/decision", views.HandoffDecision.as_view(), name="workflow-handoff"),
    path("runs/<int:run_id>/back-referral/return", views.BackReferral.as_view(), name="workflow-back-referral"),
]
