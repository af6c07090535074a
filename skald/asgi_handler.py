"""Django's ASGI handler with the sync middleware chain and the view run in one thread hop.

Django's stock ``ASGIHandler`` loads the middleware in async mode. Our middleware (Django's own,
WhiteNoise) and our views are sync, so every ``process_request``/``process_response`` and the
view became its own ``sync_to_async`` hop: about twenty thread hand-offs per request, each a
future, a wake-up of the executor thread and one of the event loop. Here the whole chain is loaded
in sync mode and runs in one ``sync_to_async(thread_sensitive=True)`` call inside the request's
``ThreadSensitiveContext``, so the request still has one thread (and one pooled database
connection) from ``request_started`` to ``request_finished``. An async view still works: the sync
chain adapts it with ``async_to_sync``.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase


class OneHopASGIHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:  # always sync, whatever is asked
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: Any = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        return response  # type: ignore[no-any-return]


def get_one_hop_asgi_application() -> OneHopASGIHandler:
    """Like ``django.core.asgi.get_asgi_application``: set Django up, return the handler."""
    import django

    django.setup(set_prefix=False)
    return OneHopASGIHandler()
