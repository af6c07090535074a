"""The kernel's fixtures (the real store, in-memory ports), so real kernel turns can be traced here."""

from tests.loop.conftest import alice, audit, bus, clock, make_env, session, store  # noqa: F401
from tests.loop.providers.conftest import make_profile, make_provider, resolver, secret_root, server  # noqa: F401
