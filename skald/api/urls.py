"""The REST API root: each app contributes its routes here."""

from __future__ import annotations

from django.urls import include, path

from skald.api import sessions

urlpatterns = [
    path("audit/", include("audit.urls")),
    path("sessions/", sessions.SessionListCreate.as_view(), name="sessions"),
    path("sessions/<int:session_id>/", sessions.SessionDetail.as_view(), name="session"),
    path("sessions/<int:session_id>/messages/", sessions.SessionMessages.as_view(), name="session-messages"),
    path("sessions/<int:session_id>/exchanges/<int:exchange_id>/", sessions.ExchangeDetail.as_view(),
         name="session-exchange"),
    path("sessions/<int:session_id>/events/", sessions.SessionEvents.as_view(), name="session-events"),
    path("sessions/<int:session_id>/stop/", sessions.SessionStop.as_view(), name="session-stop"),
]
