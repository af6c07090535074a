"""Go RE2 patterns (as gitleaks writes them) translated to Python ``re``, and a structural check
that a pattern cannot backtrack without bound.

RE2 runs in linear time whatever the pattern; ``re`` backtracks. The detector only ever runs a
pattern on a bounded window around a keyword, and :func:`backtracking_problems` refuses the shapes
that make a backtracking engine blow up on such a window (a variable-length repeat inside another
repeat, the ``(a+)+`` family). Between the two a rule costs at most a constant times its window.

Syntax the translation handles, which is all the vendored file uses: flags set in the middle of a
pattern (``p8e-(?i)[a-z]``, scoped to the rest of their group in RE2, to a ``(?i:…)`` group here),
POSIX classes (``[[:alnum:]]``) and ``\\z``. Patterns compile with ``re.ASCII`` because RE2's
``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

__all__ = ["backtracking_problems", "compile_go", "max_width", "translate", "trie_pattern"]

_POSIX = {
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "digit": "0-9", "xdigit": "0-9a-fA-F", "upper": "A-Z",
    "lower": "a-z", "space": r" \t\n\r\f\v", "word": r"\w", "punct": r"!-/:-@\[-`{-~",
}
_FLAG_GROUP = re.compile(r"\(\?([a-zA-Z]*(?:-[a-zA-Z]+)?)\)")
_POSIX_CLASS = re.compile(r"\[:([a-z]+):\]")
_UNBOUNDED = sre_constants.MAXREPEAT


def translate(pattern: str) -> str:
    """``pattern`` in RE2 syntax, rewritten for Python's ``re`` (semantics kept)."""
    out: list[str] = []
    # Each open group: where it was opened in ``out``, and how many scoped-flag groups we opened
    # inside it that must close when it closes, or around each later alternative.
    stack: list[list[Any]] = [[0, []]]
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escape = pattern[i:i + 2]
            out.append(r"\Z" if escape == r"\z" else escape)
            i += 2
            continue
        if char == "[":
            end, body = _char_class(pattern, i)
            out.append(body)
            i = end
            continue
        flags = _FLAG_GROUP.match(pattern, i)
        if flags is not None:
            at_start = not "".join(out) and len(stack) == 1
            if at_start:
                out.append(flags.group(0))
            else:
                out.append(f"(?{flags.group(1)}:")
                stack[-1][1].append(flags.group(1))
            i = flags.end()
            continue
        if char == "(":
            stack.append([len(out), []])
            out.append(char)
        elif char == ")":
            out.append(")" * len(stack[-1][1]))
            stack.pop()
            out.append(char)
        elif char == "|":
            # RE2 keeps a mid-group flag for the rest of the group, later alternatives included.
            scoped = stack[-1][1]
            out.append(")" * len(scoped) + "|" + "".join(f"(?{flag}:" for flag in scoped))
        else:
            out.append(char)
        i += 1
    out.append(")" * len(stack[0][1]))
    return "".join(out)


def _char_class(pattern: str, start: int) -> tuple[int, str]:
    """The bracket expression at ``start``: its end and its Python spelling."""
    i = start + 1
    body = ["["]
    if i < len(pattern) and pattern[i] == "^":
        body.append("^")
        i += 1
    first = True
    while i < len(pattern):
        posix = _POSIX_CLASS.match(pattern, i)
        if posix is not None:
            body.append(_POSIX[posix.group(1)])
            i = posix.end()
        elif pattern[i] == "\\":
            body.append(pattern[i:i + 2])
            i += 2
        elif pattern[i] == "]" and not first:
            body.append("]")
            return i + 1, "".join(body)
        elif pattern[i] == "[":
            body.append(r"\[")  # a literal in RE2; Python warns that it may become a nested set
            i += 1
        elif pattern[i] in "&~|" and pattern[i + 1:i + 2] == pattern[i]:
            body.append("\\" + pattern[i])
            i += 1
        else:
            body.append(pattern[i])
            i += 1
        first = False
    raise ValueError(f"unterminated character class at {start}")


def compile_go(pattern: str) -> re.Pattern[str]:
    """Translate and compile an RE2 pattern (``re.ASCII``); ``re.error`` when it does not compile."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a possible set operation is a translation bug
        return re.compile(translate(pattern), re.ASCII)


def max_width(pattern: re.Pattern[str]) -> int | None:
    """The longest text ``pattern`` can match; None when unbounded."""
    width = sre_parse.parse(pattern.pattern, pattern.flags).getwidth()[1]
    return None if width >= _UNBOUNDED else int(width)


_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT}
_POSSESSIVE = getattr(sre_constants, "POSSESSIVE_REPEAT", None)


def backtracking_problems(pattern: re.Pattern[str]) -> list[str]:
    """Why ``pattern`` could backtrack without bound; empty when its shape is safe.

    Refused: a repeat (other than a possessive one) of something that itself has a variable
    length and can repeat more than 16 times (``(a+)+``, ``(?:\\w{1,9}\\.)*``). Polynomial shapes
    such as ``\\w*\\w*`` remain possible in principle; the window bound keeps them finite, and the
    suite runs every rule against pathological input.
    """
    problems: list[str] = []
    _walk(sre_parse.parse(pattern.pattern, pattern.flags), inside_repeat=False, problems=problems)
    return problems


def _walk(items: Any, *, inside_repeat: bool, problems: list[str]) -> None:
    for op, arg in items:
        if op in _REPEATS or (_POSSESSIVE is not None and op == _POSSESSIVE):
            low, high, sub = arg
            variable = _variable(sub)
            if op != _POSSESSIVE and variable and (high == _UNBOUNDED or high > 16):
                problems.append(f"a variable-length item repeated {low}..{'∞' if high == _UNBOUNDED else high} times")
            _walk(sub, inside_repeat=True, problems=problems)
        elif op == sre_constants.SUBPATTERN:
            _walk(arg[-1], inside_repeat=inside_repeat, problems=problems)
        elif op == sre_constants.BRANCH:
            for branch in arg[1]:
                _walk(branch, inside_repeat=inside_repeat, problems=problems)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            _walk(arg[1], inside_repeat=inside_repeat, problems=problems)
        elif op == getattr(sre_constants, "ATOMIC_GROUP", None):
            _walk(arg, inside_repeat=inside_repeat, problems=problems)


def _variable(sub: Any) -> bool:
    low, high = sub.getwidth()
    return bool(low != high)


def trie_pattern(words: Iterable[str]) -> str:
    """A regex alternation shaped as a trie, so ``re`` follows one branch per character."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)
