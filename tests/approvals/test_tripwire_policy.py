"""Organisation tripwire patterns and allow-list entries (SPEC L16): validated, audited, visible in
the admin with a test box, and applied by the runtime to every turn through the plugins socket."""

from __future__ import annotations

import json

import pytest

from approvals.models import TripwireAllowEntry, TripwirePattern
from approvals.tripwires.selectors import active_rules
from approvals.tripwires.services import tripwire_allow_save, tripwire_pattern_delete, tripwire_pattern_save
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.tripwires import default_detector
from skald import plugins
from skald.core.errors import SkaldError
from tests.conftest import make_user
from tests.loop.tripwire_corpus import fakes

PATTERNS = "/admin/approvals/tripwirepattern/"
ALLOW = "/admin/approvals/tripwireallowentry/"
ACME_KEY = "ACME-7F3A9C2E5B1D4F60A8B7C6D5"


@pytest.fixture
def root(db: None):
    return make_user("root", superuser=True)


def payloads(kind: AuditKind) -> list[dict]:
    return [json.loads(row.payload) for row in AuditEvent.objects.filter(kind=kind).order_by("seq")]


def test_a_saved_pattern_is_audited_and_applied_to_the_next_turn(root) -> None:
    pattern = TripwirePattern(name="acme-key", regex=r"ACME-[0-9A-F]{24}", keywords="acme-")
    tripwire_pattern_save(actor=Actor.user(root), pattern=pattern, changed=["created"])

    assert plugins.tripwire_detector().kinds(f"key {ACME_KEY}") == ["org:acme-key"]
    (audited,) = payloads(AuditKind.TRIPWIRE_PATTERN_CHANGED)
    assert audited["created"] is True and audited["pattern"]["regex"] == r"ACME-[0-9A-F]{24}"

    tripwire_pattern_delete(actor=Actor.user(root), pattern=pattern)
    assert plugins.tripwire_detector().kinds(f"key {ACME_KEY}") == []
    assert payloads(AuditKind.TRIPWIRE_PATTERN_CHANGED)[-1]["deleted"] is True


def test_a_pattern_that_could_backtrack_is_refused_and_nothing_is_stored(root) -> None:
    with pytest.raises(SkaldError) as refused:
        tripwire_pattern_save(actor=Actor.user(root), pattern=TripwirePattern(name="bad", regex=r"(a+)+$"),
                              changed=["created"])

    assert refused.value.code == "tripwire_pattern_invalid"
    assert "regex" in refused.value.extra["fields"]
    assert not TripwirePattern.objects.exists() and payloads(AuditKind.TRIPWIRE_PATTERN_CHANGED) == []


def test_an_allow_entry_needs_a_reason_and_keeps_it_in_the_audit(root) -> None:
    fake = next(f for f in fakes() if f.kind == "twilio-api-key")
    with pytest.raises(SkaldError) as refused:
        tripwire_allow_save(actor=Actor.user(root), entry=TripwireAllowEntry(regex="^SK0{32}$"), changed=["created"])
    assert refused.value.extra["fields"]["reason"]

    tripwire_allow_save(actor=Actor.user(root), entry=TripwireAllowEntry(regex=fake.snippet, reason="load-test id"),
                        changed=["created"])

    assert default_detector().kinds(fake.snippet) == ["twilio-api-key"]
    assert plugins.tripwire_detector().kinds(fake.snippet) == []
    assert payloads(AuditKind.TRIPWIRE_ALLOW_CHANGED)[0]["entry"]["reason"] == "load-test id"


def test_the_admin_saves_a_pattern_through_the_service_and_shows_form_errors(client, root) -> None:
    client.force_login(root)

    bad = client.post(PATTERNS + "add/", {"name": "bad", "regex": "(unclosed", "keywords": "", "enabled": "on"})
    assert bad.status_code == 200 and "Not a valid regular expression" in bad.content.decode()

    good = client.post(PATTERNS + "add/", {"name": "acme-key", "regex": r"ACME-[0-9A-F]{24}", "keywords": "acme-",
                                           "enabled": "on", "note": "ticket system keys"})
    assert good.status_code == 302
    assert payloads(AuditKind.TRIPWIRE_PATTERN_CHANGED)[0]["changed"] == ["created"]


def test_the_admin_lists_the_active_rule_set_read_only(client, root) -> None:
    tripwire_pattern_save(actor=Actor.user(root), changed=["created"],
                          pattern=TripwirePattern(name="acme-key", regex=r"ACME-[0-9A-F]{24}", keywords="acme-"))
    client.force_login(root)

    page = client.get(PATTERNS + "rules/").content.decode()

    assert "<code>github-pat</code>" in page and "gitleaks v8.30.1" in page
    assert "<code>generic-secret</code>" in page and "skald" in page
    assert "<code>org:acme-key</code>" in page and "organisation" in page
    assert "freemius-secret-key" in page  # listed among the rules not loaded, with the reason


def test_the_test_box_names_what_the_text_would_trip(client, root) -> None:
    fake = next(f for f in fakes() if f.kind == "stripe-access-token")
    client.force_login(root)

    saved = client.post(PATTERNS + "test/", {"text": f"deploy with {fake.snippet} and {ACME_KEY}"}).content.decode()
    candidate = client.post(PATTERNS + "test/", {"regex": r"ACME-[0-9A-F]{24}", "keywords": "acme-",
                                                 "text": f"deploy with {ACME_KEY}"}).content.decode()
    unsafe = client.post(PATTERNS + "test/", {"regex": r"(\w+)*!", "text": "x"}).content.decode()
    clean = client.post(PATTERNS + "test/", {"text": "the pool is exhausted"}).content.decode()

    assert "Refused: stripe-access-token" in saved
    assert "Refused: org:candidate" in candidate
    assert "could backtrack without bound" in unsafe
    assert "No tripwire" in clean
    assert TripwirePattern.objects.count() == 0  # testing saves nothing


def test_the_admin_allow_list_requires_a_reason(client, root) -> None:
    client.force_login(root)

    missing = client.post(ALLOW + "add/", {"regex": "^SK0+$", "reason": "", "enabled": "on"})
    saved = client.post(ALLOW + "add/", {"regex": "^SK0+$", "reason": "a fixture id", "enabled": "on"})

    assert missing.status_code == 200
    assert saved.status_code == 302
    assert payloads(AuditKind.TRIPWIRE_ALLOW_CHANGED)[0]["entry"]["reason"] == "a fixture id"


def test_the_pattern_list_says_how_many_rules_are_active_not_only_the_organisations(client, root) -> None:
    """Issue 35: the list read "0 tripwire patterns" while every built-in rule was running."""
    client.force_login(root)
    empty = " ".join(client.get(PATTERNS).content.decode().split())
    builtin = len(active_rules())
    assert builtin > 100 and f"{builtin} credential rules are active" in empty and "0 of your organisation" in empty

    tripwire_pattern_save(actor=Actor.user(root), changed=["created"],
                          pattern=TripwirePattern(name="acme-key", regex=r"ACME-[0-9A-F]{24}", keywords="acme-"))
    one = " ".join(client.get(PATTERNS).content.decode().split())
    assert f"{builtin + 1} credential rules are active" in one and f"{builtin} built in" in one
    assert "1 of your organisation" in one
