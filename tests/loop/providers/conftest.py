"""Fixtures for the provider tests: a real local HTTPS server, a secret root, a scripted resolver."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loop.providers import connections
from loop.providers.openai_compat import OpenAICompatProvider
from loop.providers.profile import ProviderProfile
from tests.loop.providers.fake_openai_server import TEST_SECRET, FakeOpenAIServer, FakeResolver

LOOPBACK_ALLOW = (ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("::1/128"))


@pytest.fixture(autouse=True)
def no_kept_connections() -> Iterator[None]:
    """Each test's server is its own; the connections kept to the last one are closed with it."""
    yield
    connections.close_all()


@pytest.fixture
def secret_root(tmp_path: Path) -> Path:
    root = tmp_path / "secrets"
    root.mkdir()
    (root / "provider.key").write_text(f"{TEST_SECRET}\n")
    return root


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def resolver() -> FakeResolver:
    return FakeResolver({"localhost": ["127.0.0.1"], "provider.skald.test": ["127.0.0.1"]})


@pytest.fixture
def make_profile(server: FakeOpenAIServer, secret_root: Path) -> Callable[..., ProviderProfile]:
    def make(**overrides: Any) -> ProviderProfile:
        fields: dict[str, Any] = {
            "base_url": server.base_url,
            "model": "skald-test-model",
            "secret_file": "provider.key",
            "secret_root": str(secret_root),
            "allow_cidrs": LOOPBACK_ALLOW,
            "ca_file": server.ca_file,
        }
        fields.update(overrides)
        return ProviderProfile(**fields)

    return make


@pytest.fixture
def make_provider(
    make_profile: Callable[..., ProviderProfile], resolver: FakeResolver
) -> Callable[..., OpenAICompatProvider]:
    def make(*, timeout: float = 5.0, **overrides: Any) -> OpenAICompatProvider:
        return OpenAICompatProvider(make_profile(**overrides), resolver=resolver, timeout=timeout)

    return make
