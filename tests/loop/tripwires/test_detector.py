"""The credential detector on generated corpora (SPEC L16, issue 16's acceptance)."""

from __future__ import annotations

import re

import pytest

from loop.tripwires import AllowEntry, OrgPattern, PatternProblem, default_detector, organisation_detector
from tests.loop.tripwire_corpus import PLACEMENTS, benign_lines, fakes, placed_fakes

CASES = placed_fakes()


def test_the_corpus_covers_at_least_25_kinds_in_4_placements() -> None:
    assert len({fake.kind for fake in fakes()}) >= 25
    assert set(PLACEMENTS) == {"plain", "quoted", "json", "log"}
    assert len(CASES) == len(fakes()) * 4


@pytest.mark.parametrize(("placement", "fake", "text"), CASES, ids=[f"{f.kind}-{p}-{i}" for i, (p, f, _) in
                                                                     enumerate(CASES)])
def test_it_refuses_every_generated_fake_in_every_placement(placement: str, fake: object, text: str) -> None:
    assert fake.kind in default_detector().kinds(text)  # type: ignore[attr-defined]


def test_it_refuses_a_fresh_draw_at_100_percent() -> None:
    # Another seed: the rules must not fit one lucky draw.
    missed = [(p, f.kind) for p, f, text in placed_fakes(seed=2026) if f.kind not in default_detector().kinds(text)]

    assert missed == []


def test_benign_operational_lines_raise_at_most_half_a_percent() -> None:
    lines = benign_lines()
    flagged = [line for line in lines if default_detector().kinds(line)]

    assert len(lines) >= 1000
    assert len(flagged) / len(lines) <= 0.005, flagged[:5]


def test_a_finding_carries_the_kind_and_span_never_the_value() -> None:
    fake = next(f for f in fakes() if f.kind == "github-pat")
    text = f"token {fake.snippet} here"

    (finding,) = default_detector().scan(text)

    assert finding.kind == "github-pat"
    assert text[finding.start:finding.end] == fake.snippet
    assert fake.snippet not in repr(finding)


def test_offsets_hold_after_non_ascii_text() -> None:
    fake = next(f for f in fakes() if f.kind == "stripe-access-token")
    text = f"İstanbul ß straße — {fake.snippet}"

    (finding,) = default_detector().scan(text)

    assert text[finding.start:finding.end] == fake.snippet


def test_placeholders_and_references_are_not_credentials() -> None:
    for text in ["password: ${DB_PASSWORD}", "postgres://app:${PGPASSWORD}@db/app", "Authorization: Bearer <token>",
                 "api_key = os.environ['API_KEY']", "secret_key = settings.SECRET_KEY", "password=changeme",
                 "redis://:****@cache:6379", "client_secret: {{ .Values.secret }}"]:
        assert default_detector().kinds(text) == [], text


def test_an_organisation_pattern_becomes_a_kind() -> None:
    detector = organisation_detector([OrgPattern("acme-ticket-key", r"ACME-[0-9A-F]{24}", ("acme-",))])

    assert detector.kinds("deploy key ACME-0123456789ABCDEF01234567 ok") == ["org:acme-ticket-key"]
    assert default_detector().kinds("deploy key ACME-0123456789ABCDEF01234567 ok") == []


def test_an_organisation_pattern_without_keywords_runs_everywhere() -> None:
    detector = organisation_detector([OrgPattern("badge", r"\bBDG[0-9]{12}\b")])

    assert detector.kinds("badge BDG123456789012 at the door") == ["org:badge"]


def test_an_allow_entry_suppresses_a_known_benign_match() -> None:
    fake = next(f for f in fakes() if f.kind == "twilio-api-key")
    text = f"fixture id {fake.snippet}"
    detector = organisation_detector(allow=[(re.escape(fake.snippet), "a fixture id of the load-test rig")])

    assert default_detector().kinds(text) == ["twilio-api-key"]
    assert detector.kinds(text) == []
    assert detector.allow == (AllowEntry(re.compile(re.escape(fake.snippet), re.ASCII), "a fixture id of the "
                                                                                       "load-test rig"),)


@pytest.mark.parametrize(("regex", "problem"), [
    ("", "required"), ("(unclosed", "valid regular expression"), ("(a+)+b", "backtrack"), ("x*", "empty text"),
    ("a" * 501, "at most 500"),
])
def test_it_refuses_patterns_it_cannot_run_safely(regex: str, problem: str) -> None:
    with pytest.raises(PatternProblem, match=problem):
        organisation_detector([OrgPattern("bad", regex)])


def test_organisation_detectors_are_told_apart_by_fingerprint() -> None:
    first = organisation_detector([OrgPattern("a", r"AAA[0-9]{9}")])
    second = organisation_detector([OrgPattern("a", r"AAB[0-9]{9}")])

    assert len({default_detector().fingerprint, first.fingerprint, second.fingerprint}) == 3
    assert organisation_detector([OrgPattern("a", r"AAA[0-9]{9}")]) is first
