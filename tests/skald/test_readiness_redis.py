"""Readiness against the production channel layer (channels-redis on the machine's Redis)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers

from skald.readiness import _channel_layer

REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def redis_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                           "CONFIG": {"hosts": [REDIS]}}}
    channel_layers.backends.clear()
    yield channel_layers["default"]
    async_to_sync(channel_layers["default"].flush)()
    channel_layers.backends.clear()


def test_probing_the_layer_many_times_never_fills_it(redis_layer):
    # A probe that queued a message per call hit ChannelFull after 100 probes within a minute.
    assert {_channel_layer() for _ in range(150)} == {"ok"}
