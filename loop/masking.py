"""PII masking and credential tripwires for text bound to a provider (SPEC L16).

Everything here is bounded pattern matching, and the rule set is a ceiling, not a guarantee:
it raises the cost of leaking a secret or personal data, it does not prove that none leaks.
Encoded secrets (base64, hex, split across lines), unlabelled secrets (a bare password, a key
without its well-known prefix) and PII in formats not listed below pass through unchanged.

Masking replaces emails, phone numbers, payment card numbers (Luhn-checked), IBANs (mod-97
checked) and IPv4/IPv6 addresses with fixed tokens such as ``[email]``. Tripwires do not mask:
a credential refuses or withholds the text outright, and the notice names the kind, never the
value. The credential rules are :mod:`loop.tripwires` (gitleaks' rule set and Skald's own).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from loop.tripwires import Detector
from loop.tripwires.guard import CredentialTripwire, find_tripwires, withhold_credentials

__all__ = [
    "CredentialTripwire",
    "MaskResult",
    "find_tripwires",
    "mask_text",
    "screen_for_provider",
    "withhold_credentials",
]


@dataclass(frozen=True, slots=True)
class MaskResult:
    """Masked text and how many values of each kind were replaced.

    Attributes:
        text: The text with every recognised value replaced by its token.
        counts: Replacements per kind (``email``, ``phone``, ``card``, ``iban``, ``ip``); kinds
            with no match are absent.
    """

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


# --- PII ----------------------------------------------------------------------------------------
# Speed shapes this section. A regex that ``re`` must try at every position of a 64 KiB text
# costs about a millisecond, so each kind is found through a cheap locator (a literal such as '@'
# or ':' that ``re`` skips to in C, or a narrow digit prefix) and its full pattern is matched
# anchored at the candidate. Candidates start only at token boundaries and every quantifier is
# bounded, which keeps the work linear and stops a rule from matching the tail of a longer token.
# Patterns are ASCII: the formats are, and ``\d`` would otherwise admit every Unicode digit.

_Span = tuple[int, int, str]  # start, end, kind

_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_HEX_AND_COLON = frozenset("0123456789abcdefABCDEF:")
_DIGITS = frozenset("0123456789")
_ADDRESS_CHAR = re.compile(r"[\w.:]", re.ASCII)  # continues an address, so none may start after it

# Locators match a single character, so ``finditer`` steps on by one after a rejected candidate.
_EMAIL_AT = re.compile(r"@(?=[A-Za-z0-9])")
_EMAIL = re.compile(
    r"[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,63}\b",
    re.ASCII,
)

# Eight groups take seven colons (six before a dotted tail) unless "::" compresses them.
_IPV6_AT = re.compile(r":(?=:|(?:[0-9A-Fa-f]{1,4}:){5})")
# A loose candidate (hex groups and colons, optional dotted tail); ipaddress decides.
_IPV6 = re.compile(r"[0-9A-Fa-f:]{2,39}(?:(?<=:)\d{1,3}(?:\.\d{1,3}){3})?(?![\w:]|\.\d)", re.ASCII)
_IPV6_SPLIT = re.compile(r"[:.]")

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4_AT = re.compile(r"\.(?=\d{1,3}\.\d{1,3}\.\d)", re.ASCII)
_IPV4 = re.compile(rf"(?:{_OCTET}\.){{3}}{_OCTET}(?!\w|\.\d)", re.ASCII)

# The lookbehind sits after the first character so ``re`` can skip ahead on the [A-Z] class.
_IBAN = re.compile(r"[A-Z](?<![\w-][A-Z])[A-Z]\d{2}(?: ?[A-Z0-9]{4}){2,7}+(?: ?[A-Z0-9]{1,4})?(?![\w-])", re.ASCII)

# Where a card or phone can start: "+d", "(d", a trunk "0d", a 3-3 (NANP) pair or a 4-digit
# group, with at least nine digits in reach. Tables of short numbers and dates never get further.
_NUMBER_AT = re.compile(
    r"[0-9+(](?<![\w.][0-9+(])(?![0-9]{3}-[0-9]{2}-[0-9]{2}[ T])"
    r"(?:(?<=[+(0])[0-9]|[0-9]{2}(?:[0-9]|[ .-][0-9]{3}))(?=(?:[ ().+-]{0,3}[0-9]){4})",
    re.ASCII,
)
# Card layouts: unformatted, 4-4-4-4 (plus up to 3 digits), or 4-6-4/4-6-5; Luhn decides.
_CARD = re.compile(
    r"(?<![\w.+-])"
    r"(?:\d{13,19}|\d{4}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{1,3})?|\d{4}([ -])\d{6}\2\d{4,5})"
    r"(?![\w:]|[-.]\d)",
    re.ASCII,
)
# Possessive quantifiers stop the engine from retrying shorter prefixes of a rejected candidate
# (``2026-11-30 12:00`` must not become a phone number by dropping its tail).
# Before a '+' a ':' or '=' is fine (``tel:+1…``); before a bare digit it means a clock or a range.
_PHONE = re.compile(
    r"(?:(?<![\w+])(?=\+)|(?<![\w.+/:-]))(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?"
    r"\d{1,15}+(?:[ .-]\d{1,15}+){0,14}+(?![\w@]|[.:/-]\d)",
    re.ASCII,
)
_NANP = re.compile(r"\d{3}([ .-])\d{3}\1\d{4}(?!\d)", re.ASCII)
_DATE_PREFIX = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}(?!\d)|\d{1,2}[-./]\d{1,2}[-./]\d{4}(?!\d)", re.ASCII)
_GROUP_SPLIT = re.compile(r"[ .-]")
_DROP_PUNCTUATION = str.maketrans("", "", " .-()+")
_LUHN_DOUBLED = str.maketrans("0123456789", "0246813579")


def _luhn_ok(digits: str) -> bool:
    # Double every second digit from the right; a doubled digit above 9 counts as its digit sum.
    doubled = digits[-2::-2].translate(_LUHN_DOUBLED)
    return sum(map(int, digits[-1::-2] + doubled)) % 10 == 0


def _card_ok(candidate: str) -> bool:
    digits = candidate.translate(_DROP_PUNCTUATION)
    return 13 <= len(digits) <= 19 and _luhn_ok(digits)


def _iban_ok(candidate: str) -> bool:
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    rotated = compact[4:] + compact[:4]
    # Letters count as two digits (A=10 … Z=35); the remainder of a valid IBAN is 1.
    return int("".join(str(int(char, 36)) for char in rotated)) % 97 == 1


def _ipv6_ok(candidate: str) -> bool:
    if "::" not in candidate and candidate.count(":") < 6:
        return False
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    # ``1::2`` is as likely a slice as an address: demand a real-looking group or three groups.
    groups = [group for group in _IPV6_SPLIT.split(candidate) if group]
    return len(groups) >= 3 or any(len(group) >= 2 for group in groups)


def _phone_digits_ok(candidate: str) -> bool:
    return 9 <= len(candidate.translate(_DROP_PUNCTUATION)) <= 15  # E.164 allows at most 15


def _trunk_phone_ok(candidate: str) -> bool:
    return _phone_digits_ok(candidate) and all(len(group) >= 2 for group in _GROUP_SPLIT.split(candidate))


def _phone_length(candidate: str) -> int:
    """How much of ``candidate`` is a phone number; 0 when none of it is."""
    if candidate.startswith(("+", "(")):
        # An explicit +CC or (area) is a strong signal; national grouping varies too much to check.
        return _longest_valid_prefix(candidate, _phone_digits_ok)
    if (nanp := _NANP.match(candidate)) is not None:
        return nanp.end()
    # Otherwise only a trunk prefix (0…, 00…) says "phone": digit lists, years and epoch
    # timestamps look the same as unprefixed national numbers.
    if candidate.startswith("0") and not _DATE_PREFIX.match(candidate):
        return _longest_valid_prefix(candidate, _trunk_phone_ok)
    return 0


def _longest_valid_prefix(candidate: str, is_valid: Callable[[str], bool]) -> int:
    """Length of the longest prefix, cut at a separator, that validates; 0 when none does.

    A greedy candidate may swallow a neighbouring group (``4111 1111 1111 1111 12``); retrying
    at group boundaries finds the real value without asking the regex engine to backtrack.
    """
    cut = len(candidate)
    while cut > 0:
        if is_valid(candidate[:cut]):
            return cut
        cut = max(candidate.rfind(" ", 0, cut), candidate.rfind(".", 0, cut), candidate.rfind("-", 0, cut))
    return 0


def _token_start(text: str, at: int, chars: frozenset[str], limit: int) -> int | None:
    """Walk back from ``at`` over ``chars``; None when the run is longer than ``limit``."""
    start = at
    while start > 0 and text[start - 1] in chars:
        start -= 1
        if at - start > limit:
            return None
    return start


def _find_emails(text: str) -> Iterator[_Span]:
    end = 0
    for hit in _EMAIL_AT.finditer(text):
        start = _token_start(text, hit.start(), _LOCAL_CHARS, 64)
        if hit.start() < end or start is None or start == hit.start():
            continue
        if (match := _EMAIL.match(text, start)) is not None:
            end = match.end()
            yield start, end, "email"


def _find_ipv6(text: str) -> Iterator[_Span]:
    end = 0
    for hit in _IPV6_AT.finditer(text):
        start = _token_start(text, hit.start(), _HEX_AND_COLON, 39)
        if hit.start() < end or start is None or (start and _ADDRESS_CHAR.match(text, start - 1)):
            continue
        match = _IPV6.match(text, start)
        if match is not None and _ipv6_ok(match.group(0)):
            end = match.end()
            yield start, end, "ip"


def _find_ipv4(text: str) -> Iterator[_Span]:
    end = 0
    for hit in _IPV4_AT.finditer(text):
        start = _token_start(text, hit.start(), _DIGITS, 3)
        if hit.start() < end or start is None or start == hit.start():
            continue
        if start and _ADDRESS_CHAR.match(text, start - 1):
            continue
        if (match := _IPV4.match(text, start)) is not None:
            end = match.end()
            yield start, end, "ip"


def _find_ibans(text: str) -> Iterator[_Span]:
    for match in _IBAN.finditer(text):
        length = _longest_valid_prefix(match.group(0), _iban_ok)
        if length:
            yield match.start(), match.start() + length, "iban"


def _find_cards_and_phones(text: str) -> Iterator[_Span]:
    end = 0
    for hit in _NUMBER_AT.finditer(text):
        start = hit.start()
        if start < end:
            continue
        if (card := _CARD.match(text, start)) is not None:
            length = _longest_valid_prefix(card.group(0), _card_ok)
            if length:
                end = start + length
                yield start, end, "card"
                continue
        if (phone := _PHONE.match(text, start)) is not None:
            length = _phone_length(phone.group(0))
            if length:
                end = start + length
                yield start, end, "phone"


# Order matters: structured values first, so their digits are gone before cards and phones.
_FINDERS: tuple[Callable[[str], Iterator[_Span]], ...] = (
    _find_emails,
    _find_ipv6,
    _find_ipv4,
    _find_ibans,
    _find_cards_and_phones,
)


def _replace(text: str, find: Callable[[str], Iterator[_Span]], counts: dict[str, int]) -> str:
    parts: list[str] = []
    last = 0
    for start, end, kind in find(text):
        parts += (text[last:start], f"[{kind}]")
        counts[kind] = counts.get(kind, 0) + 1
        last = end
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def mask_text(text: str) -> MaskResult:
    """Mask PII in ``text``. Pure and idempotent: masking a masked text changes nothing.

    Args:
        text: Any text bound for a provider.

    Returns:
        The masked text and per-kind replacement counts.
    """
    counts: dict[str, int] = {}
    # A replacement can expose a neighbour that a boundary check rejected on the first pass, so
    # repeat until stable. Every replacement removes at least one digit, '@' or ':' and tokens
    # contain none, so this terminates; the usual case is one pass, or two when something matched.
    while True:
        masked = text
        for find in _FINDERS:
            masked = _replace(masked, find, counts)
        if masked == text:
            return MaskResult(text=masked, counts=counts)
        text = masked


def screen_for_provider(text: str, detector: Detector | None = None) -> str:
    """Refuse text carrying a credential; otherwise return it with PII masked.

    Raises:
        CredentialTripwire: A credential matched. The message lists kinds only.
    """
    kinds = find_tripwires(text, detector)
    if kinds:
        raise CredentialTripwire(kinds)
    return mask_text(text).text
