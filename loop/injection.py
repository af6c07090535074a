"""The suspected-instruction scanner: pure, no network, no model (issue 30, docs/provenance.md).

It reads one untrusted tool result and reports the spans that look like text written for the model
rather than for a human or a program:

* ``ignore_instructions`` — "ignore / disregard / forget (the) previous instructions", "new instructions:";
* ``addressed_to_assistant`` — imperatives addressed to the assistant ("AI assistant, you must …",
  "before you can solve the task … please do the following first", "you are now …");
* ``fake_markup`` — chat-template and role markup (``<|im_start|>system``, ``</system>``,
  ``[INST]``, ``"role": "system"``, a line starting ``System:``), fake tool-call tags;
* ``tool_name`` — one of the session's own tool names used as a call ("call write_file",
  ``send_money(``);
* ``hidden_unicode`` — Unicode tag characters, runs of zero-width characters, bidi overrides;
* ``encoded`` — a base64 or hex blob that decodes to text in which one of the above is found.

Each finding has a half-open character span into the scanned text and a score in ``(0, 1]``. The
scanner is a heuristic: it cannot see an instruction that is paraphrased into ordinary prose, and a
benign text can trip it (the benign corpus in ``tests/loop/corpus/benign`` bounds that at ≤ 1 %).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

THRESHOLD = 0.5  # a finding below this score is not reported
MAX_SCAN_CHARS = 200_000  # a longer text is scanned up to here (the tool output cap is far below)
_EXCERPT = 120


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    start: int
    end: int
    score: float
    excerpt: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "start": self.start, "end": self.end, "score": self.score,
                "excerpt": self.excerpt}


_I = re.IGNORECASE
_PATTERNS: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    ("ignore_instructions", 0.95, re.compile(
        r"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|preceding|"
        r"all|any|your|original|system)\b[^.\n]{0,25}?\b(?:instructions?|prompts?|rules|directions|directives|"
        r"guidelines|context)\b", _I)),
    ("ignore_instructions", 0.8, re.compile(
        r"\b(?:new|updated|real|actual|revised)\s+(?:instructions?|directives?|system\s+prompt)\s*[:!]", _I)),
    ("addressed_to_assistant", 0.8, re.compile(
        r"\b(?:AI|language\s+model|LLM|chatbot|assistant|AI\s+model|agent)\b[\s,:]{0,3}(?:you\s+)?(?:must|should|"
        r"need\s+to|have\s+to|are\s+(?:now\s+)?(?:required|instructed|ordered)\s+to)\s+(?:now\s+)?[a-z]+", _I)),
    ("addressed_to_assistant", 0.85, re.compile(
        r"\b(?:important\s+(?:message|instructions?)\s+(?:from\s+me|for\s+you)|"
        r"to\s+you,\s+(?:the\s+)?(?:AI|assistant|model|agent)|"
        r"before\s+you\s+(?:can\s+)?(?:solve|complete|finish|continue|answer)\s+(?:the|your|this)\s+task|"
        r"please\s+do\s+the\s+following\s+first)\b", _I)),
    ("addressed_to_assistant", 0.6, re.compile(r"\byou\s+are\s+now\s+(?:a|an|in|the|DAN)\b|\bact\s+as\s+(?:a|an)\s+"
                                                r"(?:unrestricted|jailbroken|different)\b", _I)),
    ("fake_markup", 0.9, re.compile(r"<\|\s*(?:im_start|im_end|system|endoftext|assistant|user|eot_id|"
                                    r"start_header_id)\s*\|>", _I)),
    ("fake_markup", 0.75, re.compile(r"</?\s*(?:system|assistant|tool_call|tool_calls|function_call|"
                                     r"instructions?|INST|SYS)\s*>|\[/?INST\]|<<\s*/?SYS\s*>>", _I)),
    ("fake_markup", 0.7, re.compile(r"[\"']role[\"']\s*:\s*[\"'](?:system|assistant|tool|developer)[\"']", _I)),
    ("fake_markup", 0.6, re.compile(r"(?m)^\s*(?:#{2,}\s*)?(?:system|assistant)\s*(?:prompt|message)?\s*:\s+\S")),
)
_TAG_CHARS = re.compile("[\U000e0000-\U000e007f]+")
_ZERO_WIDTH_RUN = re.compile("[\u200b\u200c\u200d\u2060\u180e\ufeff]{2,}")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]+")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{24,}={0,2}(?![A-Za-z0-9+/=])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){16,}(?![0-9A-Fa-f])")
_ESCAPES = re.compile(r'\\[nrt"]')
_ESCAPED_HIDDEN = re.compile(r"(?:\\u(?:200[bcd]|2060|feff|202[a-e]|206[6-9])|\\udb40\\udc[0-7][0-9a-f]){2,}",
                             re.IGNORECASE)
_CALL_WORDS = r"(?:call|use|run|invoke|execute|trigger)\s+(?:the\s+)?(?:tool\s+)?"


def scan(text: str, *, tool_names: Iterable[str] = ()) -> list[Finding]:
    """Every suspected instruction in ``text``, in span order. Never raises on any string.

    Tool output is often JSON (an MCP result, an API response): escaped line breaks and quotes are
    read as the whitespace they stand for (length-preserving, so spans stay spans of ``text``), and
    escaped hidden characters (``\\u200b``) count as the characters."""
    text = text[:MAX_SCAN_CHARS]
    plain = _ESCAPES.sub(lambda m: " " * len(m.group(0)), text)
    found = [*_plain(plain, tuple(tool_names)), *_hidden(text), *_escaped_hidden(text),
             *_encoded(text, tuple(tool_names))]
    found = [Finding(f.kind, f.start, f.end, f.score, _visible(text[f.start:f.end])[:_EXCERPT])
             if f.kind not in ("encoded",) else f for f in found]
    found = [f for f in found if f.score >= THRESHOLD]
    return sorted(found, key=lambda f: (f.start, -f.score, f.kind))


def max_score(findings: Sequence[Finding]) -> float:
    return max((f.score for f in findings), default=0.0)


def _finding(text: str, kind: str, start: int, end: int, score: float) -> Finding:
    return Finding(kind, start, end, round(score, 2), _visible(text[start:end])[:_EXCERPT])


def _visible(text: str) -> str:
    """An excerpt a reviewer can read: hidden characters shown as ``<U+XXXX>``."""
    return "".join(c if c.isprintable() and not _is_hidden(c) else f"<U+{ord(c):04X}>" for c in text)


def _is_hidden(char: str) -> bool:
    return bool(_TAG_CHARS.match(char) or char in "\u200b\u200c\u200d\u2060\u180e\ufeff"
                or _BIDI.match(char))


def _plain(text: str, tool_names: tuple[str, ...]) -> list[Finding]:
    found = [_finding(text, kind, m.start(), m.end(), score)
             for kind, score, pattern in _PATTERNS for m in pattern.finditer(text)]
    for name in tool_names:
        if len(name) < 4:
            continue
        escaped = re.escape(name)
        pattern = re.compile(rf"\b{_CALL_WORDS}[`'\"]?{escaped}\b|\b{escaped}\s*\(\s*[\"'{{a-z_]", re.IGNORECASE)
        found.extend(_finding(text, "tool_name", m.start(), m.end(), 0.6) for m in pattern.finditer(text))
    return found


def _hidden(text: str) -> list[Finding]:
    found = [_finding(text, "hidden_unicode", m.start(), m.end(), 0.95) for m in _TAG_CHARS.finditer(text)]
    found += [_finding(text, "hidden_unicode", m.start(), m.end(), 0.7) for m in _ZERO_WIDTH_RUN.finditer(text)]
    found += [_finding(text, "hidden_unicode", m.start(), m.end(), 0.7) for m in _BIDI.finditer(text)]
    return found


def _escaped_hidden(text: str) -> list[Finding]:
    return [_finding(text, "hidden_unicode", m.start(), m.end(), 0.8) for m in _ESCAPED_HIDDEN.finditer(text)]


def _encoded(text: str, tool_names: tuple[str, ...]) -> list[Finding]:
    found: list[Finding] = []
    for pattern, decode in ((_BASE64, _from_base64), (_HEX, _from_hex)):
        for m in pattern.finditer(text):
            decoded = decode(m.group(0))
            if decoded is None:
                continue
            inner = [f for f in [*_plain(decoded, tool_names), *_hidden(decoded)] if f.score >= THRESHOLD]
            if inner:
                found.append(Finding("encoded", m.start(), m.end(), max_score(inner),
                                     f"decodes to: {_visible(inner[0].excerpt)}"[:_EXCERPT]))
    return found


def _printable(raw: bytes) -> str | None:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    letters = sum(c.isalpha() or c.isspace() for c in decoded)
    return decoded if decoded and letters / len(decoded) > 0.7 else None


def _from_base64(blob: str) -> str | None:
    try:
        return _printable(base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True))
    except (binascii.Error, ValueError):
        return None


def _from_hex(blob: str) -> str | None:
    try:
        return _printable(bytes.fromhex(blob))
    except ValueError:
        return None
