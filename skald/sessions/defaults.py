"""What a conversation gets when nobody chose: its agent."""

from __future__ import annotations

DEFAULT_AGENT = "troubleshooter"
