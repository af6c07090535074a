from __future__ import annotations

from datetime import datetime

from skald.core import clock


class DjangoClock:
    def now(self) -> datetime:
        return clock.now()
