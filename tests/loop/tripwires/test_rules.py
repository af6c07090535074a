"""The vendored rule file and its translation to Python's ``re``."""

from __future__ import annotations

import hashlib
import re
import tomllib

import pytest

from loop.tripwires import default_detector
from loop.tripwires.gorex import backtracking_problems, compile_go, translate
from loop.tripwires.rules import DATA, GITLEAKS_VERSION, NOT_LOADED, gitleaks_rules

# The digest of gitleaks' config/gitleaks.toml at the vendored tag: updating the file updates this.
VENDORED_SHA256 = "e163e53b9e7e8a8511e77271e2b323ed057759542a6d988258afe3a1fa329caf"


def test_the_vendored_file_is_the_released_one_byte_for_byte() -> None:
    assert hashlib.sha256(DATA.read_bytes()).hexdigest() == VENDORED_SHA256
    assert GITLEAKS_VERSION == "v8.30.1"


def test_every_rule_loads_except_the_listed_path_scoped_ones() -> None:
    ids = [entry["id"] for entry in tomllib.loads(DATA.read_text())["rules"]]
    rules, _global = gitleaks_rules()

    assert set(NOT_LOADED) <= set(ids)
    assert sorted(rule.id for rule in rules) == sorted(set(ids) - set(NOT_LOADED))
    assert len(rules) >= 200


def test_every_rule_names_its_source() -> None:
    sources = {rule.source for rule in default_detector().rules}

    assert sources == {f"gitleaks {GITLEAKS_VERSION}", "skald"}


@pytest.mark.parametrize(("go", "python"), [
    (r"\b(p8e-(?i)[a-z0-9]{32})", r"\b(p8e-(?i:[a-z0-9]{32}))"),
    (r"(?:x(?i)ab|cd)", r"(?:x(?i:ab)|(?i:cd))"),
    (r"(?i)[a-z]+", r"(?i)[a-z]+"),
    (r"\b(pat[[:alnum:]]{14})", r"\b(pat[a-zA-Z0-9]{14})"),
    (r"abc(?:\s|\z)", r"abc(?:\s|\Z)"),
])
def test_it_translates_re2_syntax(go: str, python: str) -> None:
    assert translate(go) == python


def test_a_mid_pattern_flag_keeps_re2_semantics() -> None:
    pattern = compile_go(r"(?:x(?i)ab|cd)")

    assert pattern.fullmatch("xAB") and pattern.fullmatch("CD") and not pattern.fullmatch("XAB")


def test_no_rule_repeats_a_variable_length_item() -> None:
    problems = {rule.id: backtracking_problems(rule.pattern) for rule in default_detector().rules}

    assert {rule: found for rule, found in problems.items() if found} == {}


def test_the_structural_check_catches_the_classic_shapes() -> None:
    assert backtracking_problems(re.compile(r"(a+)+b"))
    assert backtracking_problems(re.compile(r"(?:\w{1,9}\.)*x"))
    assert backtracking_problems(re.compile(r"(?:[a-z]{1,9}\.){1,3}x")) == []


def test_anchored_templates_find_what_the_searched_original_finds() -> None:
    # gitleaks' generic assignment rule, searched as released vs. anchored at its keywords here.
    original = compile_go(next(e["regex"] for e in tomllib.loads(DATA.read_text())["rules"]
                               if e["id"] == "generic-api-key"))
    rule = next(r for r in default_detector().rules if r.id == "generic-api-key")
    text = 'settings: {"client_api_key": "Zx81QpL0mN4vB7cR2tY9"}\n'

    assert rule.anchored and rule.lead == 50
    match = original.search(text)
    assert match is not None and match.group(1) == "Zx81QpL0mN4vB7cR2tY9"
    assert default_detector().kinds(text)[:1] == ["generic-api-key"]
