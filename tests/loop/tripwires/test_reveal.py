"""Tripwires read what the provider will read (issue 28 §6): a credential hidden by JSON escapes or
zero-width characters is found in tool-call arguments and JSON tool results, at the provider seam."""

from __future__ import annotations

import json

from loop.projection import EventRow, call_key, project
from loop.tripwires import default_detector
from loop.tripwires.guard import find_tripwires
from loop.tripwires.reveal import revealed_views
from tests.loop.tripwire_corpus import fakes

SECRET = next(f.snippet for f in fakes() if f.kind == "gitlab-pat")
KEY = call_key(1, 1, 0)


def escaped(text: str) -> str:
    """Every character as a JSON \\u escape: how a model (or an attacker) can write a string."""
    return "".join(f"\\u{ord(char):04x}" for char in text)


def test_a_credential_written_with_json_escapes_in_tool_arguments_is_found() -> None:
    arguments = f'{{"path": "notes.txt", "content": "{escaped(SECRET)}"}}'
    assert SECRET not in arguments and json.loads(arguments)["content"] == SECRET
    assert find_tripwires(arguments) == ["gitlab-pat"]


def test_an_escaped_slash_or_a_nested_key_does_not_hide_one_either() -> None:
    nested = json.dumps({"outer": [{"deep": {SECRET.replace("-", "\\u002d"): 1}}]}).replace("\\\\", "\\")
    assert find_tripwires(nested) == ["gitlab-pat"]


def test_zero_width_characters_inside_the_token_are_removed_before_screening() -> None:
    for hidden in ("\u200b", "\u200d", "\u2060", "\ufeff", "\u00ad"):
        split = f"deploy with {SECRET[:6]}{hidden}{SECRET[6:]}"
        assert find_tripwires(split) == ["gitlab-pat"], repr(hidden)


def test_both_at_once_an_escaped_zero_width_character_in_json() -> None:
    arguments = json.dumps({"value": f"{SECRET[:6]}\u200b{SECRET[6:]}"})  # ensure_ascii: \u200b in the text
    assert "\\u200b" in arguments
    assert find_tripwires(arguments) == ["gitlab-pat"]


def test_plain_text_and_ordinary_json_offer_no_extra_view() -> None:
    assert list(revealed_views("a plain line of log output")) == []
    assert list(revealed_views('{"path": "a.txt"}')) == []  # no escape: the raw text is what is read
    assert list(revealed_views("a\u00e9 accent, no zero-width character")) == []
    assert find_tripwires('{"content": "line one\\nline two"}') == []


def test_a_token_after_a_newline_escape_is_found() -> None:
    """Raw, the escape's letter ``n`` glues to the token and the rule's boundary fails; decoded, it is a
    line break."""
    aws = next(f.snippet for f in fakes() if f.kind == "aws-access-token")
    arguments = json.dumps({"log": f"first line\n{aws}"})
    assert default_detector().kinds(arguments) == []  # what the raw text alone let through
    assert find_tripwires(arguments) == ["aws-access-token"]


def test_a_deeply_nested_document_is_screened_without_recursion() -> None:
    deep = "[" * 5000 + json.dumps(escaped(SECRET)).replace("\\\\", "\\") + "]" * 5000
    assert find_tripwires(deep) == ["gitlab-pat"]


def test_the_provider_seam_withholds_escaped_credentials_in_arguments_and_json_results() -> None:
    arguments = f'{{"value": "{escaped(SECRET)}"}}'
    result = json.dumps({"value": SECRET.replace("-", "\u200b-")}, ensure_ascii=True)
    rows = [
        EventRow(1, "user", {"content": "store the token"}),
        EventRow(2, "assistant", {"content": "", "turn": 1, "tool_calls": [
            {"key": KEY, "id": "p1", "name": "scratchpad_set", "arguments": arguments}]}),
        EventRow(3, "tool_result", {"key": KEY, "name": "scratchpad_set", "content": result}),
    ]
    messages = project(rows)
    call = messages[1].tool_calls[0]  # type: ignore[attr-defined]
    assert "tool arguments withheld: it matched credential tripwires (gitlab-pat)" in call.arguments
    assert "tool output withheld: it matched credential tripwires (gitlab-pat)" in messages[2].content  # type: ignore[attr-defined]
