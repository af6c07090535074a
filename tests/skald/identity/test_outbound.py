"""Every fetch from the identity provider goes through the guarded client (issue 26): discovery and
the key set are refused on a network the profile does not allow, and answered when it does."""

from __future__ import annotations

from typing import Any

import pytest

from skald.identity.oidc_config import OidcProfileError, discovery, discovery_forget, oidc_config
from tests.skald.identity.conftest import oidc_env
from tests.skald.identity.provider import Provider


def test_discovery_on_loopback_is_refused_unless_the_profile_allows_it(provider: Provider, settings: Any) -> None:
    settings.SKALD_OIDC_ENV = {k: v for k, v in oidc_env(provider).items() if k != "SKALD_OIDC_ALLOW_CIDRS"}
    discovery_forget()
    config = oidc_config()
    assert config is not None
    with pytest.raises(OidcProfileError, match="provider_ssrf_refused"):
        discovery(config)
    settings.SKALD_OIDC_ENV = oidc_env(provider)
    discovery_forget()
    allowed = oidc_config()
    assert allowed is not None and discovery(allowed)["issuer"] == provider.issuer
    discovery_forget()


def test_a_malformed_allow_list_is_a_profile_error(provider: Provider, settings: Any) -> None:
    from skald.identity.oidc_config import oidc_error

    settings.SKALD_OIDC_ENV = {**oidc_env(provider), "SKALD_OIDC_ALLOW_CIDRS": "127.0.0.1/8"}
    assert oidc_error() == "SKALD_OIDC_ALLOW_CIDRS: entry 1 is not a valid CIDR"
