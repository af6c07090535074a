"""A real OpenID Connect provider on loopback, and Skald configured to trust it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from skald.identity.oidc_config import discovery_forget
from tests.skald.identity.provider import CLIENT_ID, CLIENT_SECRET, Provider


@pytest.fixture
def provider() -> Iterator[Provider]:
    running = Provider(redirect_uris=["http://testserver/oidc/callback/"]).start()
    yield running
    running.stop()


def oidc_env(provider: Provider) -> dict[str, str]:
    return {"SKALD_OIDC_ISSUER": provider.issuer, "SKALD_OIDC_CLIENT_ID": CLIENT_ID,
            "SKALD_OIDC_CLIENT_SECRET": CLIENT_SECRET, "SKALD_OIDC_PROVIDER_NAME": "Test IdP",
            # The provider serves on loopback: the guarded client admits it only when allowed.
            "SKALD_OIDC_ALLOW_CIDRS": "127.0.0.0/8"}


@pytest.fixture
def sso(provider: Provider, settings: Any) -> Iterator[Provider]:
    """Skald trusting ``provider`` (the discovery cache is per issuer: forgotten around each test)."""
    settings.SKALD_OIDC_ENV = oidc_env(provider)
    discovery_forget()
    yield provider
    discovery_forget()
