"""Websocket routes."""

from __future__ import annotations

from django.urls import path

from skald.admin.live import AdminLiveConsumer
from skald.consumers import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<int:session_id>/", SessionConsumer.as_asgi()),
    path("ws/admin/live/", AdminLiveConsumer.as_asgi()),
]
