"""The one clock. Domain code asks ``clock.now()``; tests freeze it with time-machine."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    return timezone.now()
