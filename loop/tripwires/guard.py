"""The kernel's uses of the credential detector: name the kinds, withhold, refuse (the error).

Each takes the detector to apply (the organisation's, handed in by the caller) and defaults to the
vendored rule set. Nothing here ever returns or raises a credential's value.
"""

from __future__ import annotations

from loop.errors import HarnessError
from loop.tripwires import Detector, default_detector
from loop.tripwires.reveal import revealed_views

__all__ = ["CredentialTripwire", "find_tripwires", "withheld_notice", "withhold_credentials"]


class CredentialTripwire(HarnessError):
    """Text bound for a provider carries a credential. The message names the kinds only."""

    code = "credential_tripwire"

    def __init__(self, kinds: list[str]) -> None:
        super().__init__(f"credential tripwire: {', '.join(kinds)}")
        self.kinds: tuple[str, ...] = tuple(kinds)


def find_tripwires(text: str, detector: Detector | None = None) -> list[str]:
    """The credential kinds present in ``text`` (such as ``github-pat``), never the values: in the
    raw text and in what a provider would read of it (JSON strings decoded, zero-width characters
    removed; see :mod:`loop.tripwires.reveal`).

    Args:
        text: Any text bound for a provider.
        detector: The rule set to apply; the vendored default when None.
    """
    active = detector or default_detector()
    kinds = active.kinds(text)
    # What the provider reads may differ from the raw text: decoded JSON strings, zero-width
    # characters removed (loop.tripwires.reveal).
    for view in revealed_views(text):
        kinds += [kind for kind in active.kinds(view) if kind not in kinds]
    return kinds


def withhold_credentials(text: str, *, what: str = "content", detector: Detector | None = None) -> str:
    """``text`` unchanged (the same object), or a notice naming the kinds it matched in its place."""
    kinds = find_tripwires(text, detector)
    if kinds:
        return withheld_notice(what, kinds)
    return text


def withheld_notice(what: str, kinds: list[str]) -> str:
    return f"[{what} withheld: it matched credential tripwires ({', '.join(kinds)})]"
