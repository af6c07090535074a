"""Tripwire rules as data: what one rule is, and the vendored gitleaks rule file loaded into rules.

The vendored file is ``data/gitleaks.toml`` from gitleaks (MIT, ``data/LICENSE.gitleaks``); its
version is :data:`GITLEAKS_VERSION`. It is kept byte for byte as released, so updating it is a
copy. What changes on load: the rules in :data:`NOT_LOADED` are left out; patterns are translated
(:mod:`loop.tripwires.gorex`); a secret may also end at sentence punctuation (:func:`_for_prose`);
the curl rules' ``.*`` is bounded (:data:`BOUNDED_LINES`); and gitleaks' keyword-assignment
template is anchored at its keyword rather than searched (:func:`_template`).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from loop.tripwires.gorex import compile_go, max_width, trie_pattern

__all__ = [
    "GITLEAKS_COMMIT",
    "GITLEAKS_VERSION",
    "NOT_LOADED",
    "Allowlist",
    "Rule",
    "gitleaks_rules",
    "shannon_entropy",
]

GITLEAKS_VERSION = "v8.30.1"
GITLEAKS_COMMIT = "83d9cd684c87d95d656c1458ef04895a7f1cbd8e"
DATA = Path(__file__).with_name("data") / "gitleaks.toml"
SOURCE_GITLEAKS = f"gitleaks {GITLEAKS_VERSION}"

# A match may start this far before its keyword and end this far after it when the pattern itself
# is unbounded (``{250,}``, ``.*``): the window the detector hands to the pattern.
UNBOUNDED_REACH = 4096

# Rules of the file that are not loaded, and why. Every other rule is.
NOT_LOADED: Mapping[str, str] = {
    # gitleaks applies these only to files with a given path; text bound for a model has none.
    "freemius-secret-key": "applies to .php files only",
    "hashicorp-tf-password": "applies to .tf/.hcl files only",
    "kubernetes-secret-yaml": "applies to .yaml files only",
    "nuget-config-password": "applies to nuget.config files only",
    "pkcs12-file": "matches a file name, not content",
}


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value`` (gitleaks' measure: character frequencies, log base 2)."""
    if not value:
        return 0.0
    size = len(value)
    return -sum(count / size * math.log2(count / size) for count in Counter(value).values())


@dataclass(frozen=True, slots=True)
class Allowlist:
    """gitleaks' allowlist semantics: a finding is allowed when ``regexes`` match its ``target``
    (the secret, the whole match or the line) or the secret contains a stop word; with condition
    AND every check present must hold, and a path or commit check never holds here."""

    regexes: re.Pattern[str] | None = None
    stopwords: re.Pattern[str] | None = None  # lowercase words as one trie
    target: str = "secret"  # secret | match | line
    require_all: bool = False
    has_path_or_commit: bool = False

    def allows(self, *, secret: str, match: str, line: str) -> bool:
        subject = {"match": match, "line": line}.get(self.target, secret)
        by_regex = self.regexes is not None and bool(secret) and self.regexes.search(subject) is not None
        by_stopword = self.stopwords is not None and self.stopwords.search(secret.lower()) is not None
        if not self.require_all:
            return by_regex or by_stopword
        checks = []
        if self.has_path_or_commit:
            checks.append(False)
        if self.regexes is not None:
            checks.append(by_regex)
        if self.stopwords is not None:
            checks.append(by_stopword)
        return bool(checks) and all(checks)


@dataclass(frozen=True, slots=True)
class Rule:
    """One credential kind. ``id`` is what a refusal names; never the value.

    Attributes:
        id: The kind, e.g. ``github-pat``; organisation rules are prefixed ``org:``.
        pattern: Matched only on windows around a keyword hit (see the detector).
        keywords: Lowercase literals; the rule runs only where one occurs. Empty: everywhere.
        source: Where the rule comes from (``gitleaks v8.30.1``, ``skald``, ``organisation``).
        description: What the rule finds, as the admin's rule list shows it.
        entropy: When set, a secret of at most this Shannon entropy is not a finding.
        secret_group: The capture group holding the secret; 0 means the first non-empty group.
        allowlists: Rule-specific exceptions (gitleaks semantics).
        check: An extra test of the secret (a checksum, a decoded form); False drops the finding.
        reach: How far a match may extend on either side of its keyword.
        anchored: The pattern starts with one of ``keywords`` and is tried only at their
            occurrences (``re.match``), never searched for.
        lead: For anchored rules, how many name characters (``[\\w.-]``) before the keyword
            belong to the match (``my_api_key=…`` matches from ``my``).
    """

    id: str
    pattern: re.Pattern[str]
    keywords: tuple[str, ...]
    source: str
    description: str = ""
    entropy: float = 0.0
    secret_group: int = 0
    allowlists: tuple[Allowlist, ...] = ()
    check: Callable[[str], bool] | None = field(default=None, compare=False)
    reach: int = UNBOUNDED_REACH
    anchored: bool = False
    lead: int = 0

    @classmethod
    def build(cls, *, id: str, pattern: re.Pattern[str], keywords: Sequence[str], source: str,
              **options: Any) -> Rule:
        """A rule whose reach is the pattern's own maximum width (capped for unbounded ones)."""
        width = max_width(pattern)
        reach = UNBOUNDED_REACH if width is None else min(width, UNBOUNDED_REACH)
        return cls(id=id, pattern=pattern, keywords=tuple(k.lower() for k in keywords), source=source, reach=reach,
                   **options)

    def secret_of(self, match: re.Match[str]) -> str:
        """The secret in ``match``: the configured group, else the first non-empty group, else all."""
        if self.secret_group:
            return match.group(self.secret_group) or ""
        for group in match.groups():
            if group:
                return group
        return match.group(0).strip("\n")


def _allowlist(entry: Mapping[str, Any]) -> Allowlist:
    regexes = entry.get("regexes") or []
    stopwords = {word.lower() for word in entry.get("stopwords", [])}
    return Allowlist(
        regexes=compile_go("|".join(f"(?:{r})" for r in regexes)) if regexes else None,
        stopwords=re.compile(trie_pattern(stopwords)) if stopwords else None,
        target=entry.get("regexTarget", "secret") or "secret",
        require_all=str(entry.get("condition", "OR")).upper() == "AND",
        has_path_or_commit=bool(entry.get("paths") or entry.get("commits")),
    )


# gitleaks' keyword-assignment template: ``(?i)[\w.-]{0,50}?(?:word|word…)…``. Searching it costs
# fifty steps at every position of a window; anchored at its words it costs a few per occurrence.
# Five rules write it ``[\w.-]{0,50}?(?i:[\w.-]{0,50}?(?:word)…)``: two leads, 2,500 ways per position.
_TEMPLATE_LEAD = re.compile(r"^(?:\(\?i\)|\[\\w\.-\]\{0,50\}\?(?P<scoped>\(\?i:))\[\\w\.-\]\{0,50\}\?(?=\(\?:)")
_LITERAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-,")
_CASE_PAIR = re.compile(r"\[([A-Za-z])([A-Za-z])\]")


def _bare_chars(pattern: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """``(index, char)`` of each character of ``pattern`` from ``start`` that is neither escaped
    nor inside a character class: the ones that can open, close or split a group."""
    i = start
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
        elif char == "[":
            i = pattern.index("]", i + 2) + 1
        else:
            yield i, char
            i += 1


def _group_end(pattern: str, start: int) -> int:
    """Index just past the group opening at ``pattern[start]``."""
    depth = 0
    for i, char in _bare_chars(pattern, start):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i + 1
    raise ValueError("unbalanced group")


def _alternatives(body: str) -> list[str]:
    """``body`` split at its top-level ``|``."""
    parts, depth, last = [], 0, 0
    for i, char in _bare_chars(body):
        if char in "()":
            depth += 1 if char == "(" else -1
        elif char == "|" and depth == 0:
            parts.append(body[last:i])
            last = i + 1
    return [*parts, body[last:]]


def _anchor_words(alternative: str) -> list[str]:
    """The lowercase literal each way of matching ``alternative`` starts with ('' when one has none)."""
    group = re.match(r"\(\?(?:-i)?:", alternative)
    if group is not None and _group_end(alternative, 0) == len(alternative):
        return [w for alt in _alternatives(alternative[group.end():-1]) for w in _anchor_words(alt)]
    word, i = [], 0
    while i < len(alternative):
        pair = _CASE_PAIR.match(alternative, i)
        if pair is not None and pair.group(1).lower() == pair.group(2).lower():
            word.append(pair.group(1).lower())
            i = pair.end()
        elif alternative[i].lower() in _LITERAL_CHARS and alternative[i + 1:i + 2] not in ("?", "*", "{"):
            word.append(alternative[i].lower())
            i += 1
        else:
            break
    return ["".join(word)]


def _template(regex: str) -> tuple[str, list[str]] | None:
    """gitleaks' template without its lead, and the words it starts with; None if not one."""
    lead = _TEMPLATE_LEAD.match(regex)
    if lead is None:
        return None
    body_end = _group_end(regex, lead.end())
    words = [w for alt in _alternatives(regex[lead.end() + 3:body_end - 1]) for w in _anchor_words(alt)]
    if min(map(len, words)) < 3:
        return None
    flag = "(?i:" if lead.group("scoped") else "(?i)"
    return flag + regex[lead.end():], sorted(set(words))


# gitleaks ends most secrets with ``(?:[\x60'"\s;]|\\[nr]|$)``: the next character of a source
# line. In prose a token is as often followed by a full stop, a comma or a bracket, which that
# class turns into a miss ("use sk_live_… , please"); those characters end a secret here too.
_SOURCE_END = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_PROSE_END = r"""(?:[\x60'"\s;.,:!?)\]}>|]|\\[nr]|$)"""


def _for_prose(regex: str) -> str:
    return regex.replace(_SOURCE_END, _PROSE_END)


# The curl rules look for ``-H``/``-u`` anywhere after ``curl`` on up to six lines with ``.*``: a
# backtracking engine retries the rest of the line from every ``curl`` (seconds on "curl curl …").
# Here an option must come within 128 characters of the word or the line break before it.
BOUNDED_LINES = ("curl-auth-header", "curl-auth-user")


def _bounded_lines(regex: str) -> str:
    return regex.replace(".*?", ".{0,128}?").replace(".*", ".{0,128}")


def _gitleaks_rule(entry: Mapping[str, Any]) -> Rule:
    options: dict[str, Any] = {
        "description": entry.get("description", ""), "entropy": float(entry.get("entropy", 0.0)),
        "secret_group": int(entry.get("secretGroup", 0)),
        "allowlists": tuple(_allowlist(a) for a in entry.get("allowlists", [])),
    }
    regex = _for_prose(entry["regex"])
    if entry["id"] in BOUNDED_LINES:
        regex = _bounded_lines(regex)
    template = _template(regex)
    if template is None:
        return Rule.build(id=entry["id"], pattern=compile_go(regex), keywords=entry.get("keywords", []),
                          source=SOURCE_GITLEAKS, **options)
    pattern, words = template
    return Rule.build(id=entry["id"], pattern=compile_go(pattern), keywords=words, source=SOURCE_GITLEAKS,
                      anchored=True, lead=50, **options)


@lru_cache(maxsize=1)
def gitleaks_rules() -> tuple[tuple[Rule, ...], Allowlist]:
    """Every loadable rule of the vendored file, and the file's global allowlist.

    Raises:
        ValueError: A rule outside :data:`NOT_LOADED` has no pattern or does not translate.
    """
    config = tomllib.loads(DATA.read_text(encoding="utf-8"))
    rules = []
    for entry in config["rules"]:
        if entry["id"] in NOT_LOADED:
            continue
        if not entry.get("regex"):
            raise ValueError(f"gitleaks rule {entry['id']} has no regex and is not listed in NOT_LOADED")
        rules.append(_gitleaks_rule(entry))
    return tuple(rules), _allowlist(config.get("allowlist", {}))
