"""Argument matching with normalisation (loop/provenance.py): pure, over rows."""

from __future__ import annotations

from loop.provenance import EventRowView, compute, entities, match_arguments, narrative_sources

MAIL = ("From: billing@supplier.example\nHello,\nour bank details changed. Please pay invoice 4471 to\n"
        "IBAN DE89 3704 0044 0532 0130 00, or call +49 (30) 1234-5678.\nPortal: https://pay.supplier.example/inv/4471\n")


def rows(*extra: EventRowView) -> list[EventRowView]:
    return [EventRowView(3, "tool_result", {"key": "e1:t1:c0", "name": "mcp__mail__read_inbox", "content": MAIL,
                                            "trust": "untrusted"}, ""), *extra]


def test_an_iban_typed_without_its_spaces_is_found_where_it_sits():
    (path, _value, seq, start, end, how), = match_arguments({"iban": "de89370400440532013000"}, [(3, MAIL)])
    assert (path, seq, how) == ("iban", 3, "separators")
    assert MAIL[start:end] == "DE89 3704 0044 0532 0130 00"


def test_a_phone_number_with_other_separators_and_a_url_without_its_scheme_are_found():
    found = match_arguments({"to": {"phone": "+49 30 12345678", "site": "pay.supplier.example/inv/4471"}},
                            [(3, MAIL)])
    by_path = {f[0]: f for f in found}
    assert MAIL[by_path["to.phone"][3]:by_path["to.phone"][4]] == "49 (30) 1234-5678"  # digits to digits
    assert by_path["to.site"][5] == "exact"
    url = match_arguments({"url": "HTTPS://www.Pay.Supplier.example/inv/4471/"}, [(3, MAIL)])
    assert url and url[0][5] == "separators"


def test_case_and_whitespace_are_normalised_for_prose():
    (found,) = match_arguments({"note": "OUR   bank details\tchanged"}, [(3, MAIL)])
    assert found[5] == "normalised"
    assert MAIL[found[3]:found[4]] == "our bank details changed"


def test_an_identifier_inside_a_longer_value_is_found_and_marked_on_its_argument():
    content = "Payment instruction\nBeneficiary: ACME\nIBAN: DE89370400440532013000\n"
    (found,) = match_arguments({"content": content}, [(3, MAIL)])
    assert found[0] == "content"
    assert found[1] == "DE89370400440532013000"


def test_short_values_and_values_not_in_untrusted_content_are_not_matched():
    assert match_arguments({"n": 42, "flag": "yes", "path": "reports/summary.md"}, [(3, MAIL)]) == []
    assert match_arguments({"text": "the quick brown fox"}, [(3, MAIL)]) == []


def test_prose_that_differs_only_in_punctuation_is_not_the_same_value():
    assert match_arguments({"note": "hello there, general"}, [(3, "Hello there general")]) == []


def test_entities_pick_identifiers_out_of_text():
    kinds = {kind for kind, _ in entities(MAIL)}
    assert {"iban", "url", "email", "phone"} <= kinds


def test_an_untainted_narrative_has_no_provenance_and_another_narratives_taint_does_not_leak():
    child = EventRowView(3, "tool_result", {"key": "e1:t1:c0", "name": "read_logs", "content": "x",
                                            "trust": "untrusted"}, "child:log-analyst:c7:")
    assert compute([child], narrative="", arguments={}).tainted is False
    assert compute([child], narrative="child:log-analyst:c7:", arguments={}).tainted is True


def test_a_call_with_an_argument_from_a_suspect_result_says_so():
    suspect = EventRowView(4, "control:injection_suspect", {"result_seq": 3, "key": "e1:t1:c0", "kind":
                                                             "ignore_instructions", "start": 0, "end": 5,
                                                             "score": 0.95, "excerpt": "x"}, "")
    found = compute(rows(suspect), narrative="", arguments={"iban": "DE89370400440532013000"})
    assert found.tainted and found.argument_from_untrusted and found.argument_from_suspect
    assert found.injection_suspected
    assert found.facts() == {"tainted": "true", "argument_from_untrusted": "true", "injection_suspected": "true",
                             "argument_from_suspect": "true", "read_only": "false"}
    (source,) = narrative_sources(rows(suspect), narrative="")
    assert (source.seq, source.tool, source.server) == (3, "mcp__mail__read_inbox", "mail")
    assert source.suspects[0]["seq"] == 4


def test_rows_after_the_call_do_not_count():
    assert compute(rows(), narrative="", arguments={}, before_seq=3).tainted is False
