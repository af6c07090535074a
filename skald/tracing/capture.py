"""What content capture records: text screened exactly as provider input is (SPEC L16).

Only with ``SKALD_OTEL_CAPTURE_CONTENT=1``. A text carrying a credential (the kernel's rules plus
the organisation's, ``skald.plugins.tripwire_detector``) is replaced by the kernel's notice naming
the kinds, never the value; what passes is PII-masked (``loop.masking.mask_text``) and cut to
:data:`MAX_CHARS`. So a secret never reaches a span.
"""

from __future__ import annotations

from loop.masking import mask_text, withhold_credentials
from skald import plugins

MAX_CHARS = 8192


def screen(text: str, *, what: str) -> str:
    """``text`` as a span may carry it: withheld when it holds a credential, else masked and cut."""
    kept = withhold_credentials(text, what=what, detector=plugins.tripwire_detector())
    masked = mask_text(kept).text
    return masked if len(masked) <= MAX_CHARS else masked[:MAX_CHARS] + "…"
