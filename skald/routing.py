"""Websocket routes."""

from __future__ import annotations

from django.urls import path

from skald.consumers import SessionConsumer

websocket_urlpatterns = [
    path("ws/sessions/<int:session_id>/", SessionConsumer.as_asgi()),
]
