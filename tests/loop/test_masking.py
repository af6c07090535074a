"""PII masking and credential tripwires (SPEC L16)."""

from __future__ import annotations

import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop.errors import HarnessError
from loop.masking import CredentialTripwire, find_tripwires, mask_text, screen_for_provider

# --- masking ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to alice@example.com today", "write to [email] today"),
        ("cc bob.smith+skald@mail.example.co.uk.", "cc [email]."),
        ("call +1 555 123 4567.", "call [phone]."),
        ("call +4915112345678", "call [phone]"),
        ("call +44 (0) 20 7946 0958", "call [phone]"),
        ("call (555) 123-4567", "call [phone]"),
        ("call 555-123-4567 twice", "call [phone] twice"),
        ("call 0171 1234567", "call [phone]"),
        ("call 06 12 34 56 78", "call [phone]"),
        ("tel:+14155552671", "tel:[phone]"),
        ("card 4111 1111 1111 1111 exp 12/29", "card [card] exp 12/29"),
        ("card 4111-1111-1111-1111", "card [card]"),
        ("card 4111111111111111", "card [card]"),
        ("amex 3782 822463 10005", "amex [card]"),
        ("iban DE89 3704 0044 0532 0130 00 thanks", "iban [iban] thanks"),
        ("iban DE89370400440532013000", "iban [iban]"),
        ("iban GB82 WEST 1234 5698 7654 32", "iban [iban]"),
        ("from 192.168.1.100:8080", "from [ip]:8080"),
        ("route 10.0.0.0/8", "route [ip]/8"),
        ("from fe80::1ff:fe23:4567:890a now", "from [ip] now"),
        ("from 2001:0db8:85a3:0000:0000:8a2e:0370:7334", "from [ip]"),
        ("mapped ::ffff:192.168.1.1", "mapped [ip]"),
    ],
)
def test_it_masks_each_pii_kind(text: str, expected: str) -> None:
    assert mask_text(text).text == expected


def test_it_counts_replacements_per_kind() -> None:
    result = mask_text("alice@example.com, bob@example.org, 10.1.2.3 and 4111 1111 1111 1111")

    assert result.text == "[email], [email], [ip] and [card]"
    assert result.counts == {"email": 2, "ip": 1, "card": 1}
    assert result.total == 4


@pytest.mark.parametrize(
    "text",
    [
        "card 4111 1111 1111 1112",  # fails Luhn
        "order 1234567812345678",  # fails Luhn
        "iban DE89370400440532013001",  # bad mod-97 checksum
        "iban GB82 WEST 1234 5698 7654 33",  # bad mod-97 checksum
        "iban GB00 WEST 1234 5698 7654 32",  # bad check digits
    ],
)
def test_it_leaves_numbers_with_bad_checksums_alone(text: str) -> None:
    assert mask_text(text).text == text


@pytest.mark.parametrize(
    "text",
    [
        "at 2026-11-30 12:00:01 the job ran",
        "runtime 3.11.4, build 1.2.3",
        "retry 42 times, 8 workers, 16 slots",
        "epoch 1764504001",
        "years 2024 2025 2026",
        "matrix 1 0 0 1 0 1 1 0 0 1 0 1",
        "price 1,234,567.89",
        "slice x[1::2] and std::vector",
        "at 12:00:01 and 10:30",
        "MAC 00:1a:2b:3c:4d:5e",
    ],
)
def test_it_leaves_ordinary_numbers_alone(text: str) -> None:
    assert mask_text(text).text == text


def test_it_masks_a_card_followed_by_another_number() -> None:
    assert mask_text("4111 1111 1111 1111 2026").text == "[card] 2026"


# --- tripwires (the detector itself is tested in tests/loop/tripwires/) -------------------------

_RNG = random.Random(16)
_AWS_KEY = "AK" + "IA" + "".join(_RNG.choice(string.ascii_uppercase + "234567") for _ in range(16))
_OPENAI = "sk-" + "proj-" + "a1B2c3D4e5" * 7 + "a1B2" + "T3Blbk" + "FJ" + "Z9y8X7w6V5" * 7 + "Z9y8"


def test_it_refuses_credentials_without_echoing_them() -> None:
    text = f"alice@example.com uses {_OPENAI} and {_AWS_KEY}"

    with pytest.raises(CredentialTripwire) as caught:
        screen_for_provider(text)

    error = caught.value
    assert isinstance(error, HarnessError)
    assert error.code == "credential_tripwire"
    assert error.kinds == ("aws-access-token", "openai-api-key")
    message = str(error)
    assert "aws-access-token" in message and "openai-api-key" in message
    for secret in (_OPENAI, _AWS_KEY, "alice@example.com", "a1B2c3"):
        assert secret not in message


def test_it_names_the_kinds_in_rule_order() -> None:
    assert find_tripwires(f"{_OPENAI} then {_AWS_KEY}") == ["aws-access-token", "openai-api-key"]


def test_it_masks_clean_text_for_the_provider() -> None:
    assert screen_for_provider("ping alice@example.com at 10.0.0.1") == "ping [email] at [ip]"


# --- properties ---------------------------------------------------------------------------------

_FRAGMENTS = [
    "alice@example.com",
    "+1 555 123 4567",
    "(555) 123-4567",
    "0171 1234567",
    "4111 1111 1111 1111",
    "4111111111111111",
    "DE89 3704 0044 0532 0130 00",
    "192.168.1.1",
    "fe80::1",
    "::ffff:10.0.0.1",
    "2026-11-30 12:00:01",
    "[card]",
    "[ip]",
    "-",
    ".",
    ":",
    " ",
    "@",
    "+",
]
_PIECES = st.one_of(
    st.sampled_from(_FRAGMENTS),
    st.text(alphabet="0123456789 .-:+()@[]abcdefABZ_/", max_size=12),
    st.text(max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_masking_is_idempotent_and_never_raises(text: str) -> None:
    once = mask_text(text)
    twice = mask_text(once.text)

    assert twice.text == once.text
    assert twice.counts == {}
