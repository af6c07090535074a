"""ASGI entry point: HTTP through Django (one thread hop per request, behind the admission gate),
websockets through Channels (origin-checked)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
from skald.asgi_handler import get_one_hop_asgi_application

django_asgi_app = get_one_hop_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from skald.backpressure import admission_gate  # noqa: E402
from skald.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": admission_gate(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
