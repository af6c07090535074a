"""Skald's own rules: the kinds secret scanners word for files but a chat or a tool result carries
in other shapes — private key headers without a body, URLs and connection strings with a password,
HTTP basic and bearer authorisation, and keyword-anchored generic secrets with an entropy check.

Each has a cheap keyword, bounded quantifiers, and a ``check`` on the secret that drops the
obvious placeholders (``${DB_PASSWORD}``, ``<token>``, ``****``) so examples in docs do not trip.
"""

from __future__ import annotations

import binascii
import re
from base64 import b64decode

from loop.tripwires.rules import Rule, shannon_entropy

__all__ = ["SOURCE_SKALD", "skald_rules"]

SOURCE_SKALD = "skald"

_PLACEHOLDER = re.compile(
    r"(?i)^(?:\$\{?[\w.-]*\}?|\$\(.*\)|\{\{.*\}\}|<[^>]*>|%\(?[\w.-]*\)?s?%?|\*+|x+|\.{3}|_+|-+"
    r"|pass(?:word)?|passwd|pwd|pw|secret|changeme|change_me|redacted|hidden|none|null|nil|true|false|example"
    r"|your[_-]?[\w-]*|my[_-]?[\w-]*)$"
)
_HAS_DIGIT = re.compile(r"\d")
_HAS_LETTER = re.compile(r"[A-Za-z]")
_DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(?:(?:\.|::|->)[A-Za-z_]\w*)+(?:\(\))?$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]{1,30}://")
# A file path (segments of name characters), not base64 that happens to start with a slash.
_PATHLIKE = re.compile(r"^(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]*)+$|^[A-Za-z]:\\")


def _not_placeholder(secret: str) -> bool:
    return _PLACEHOLDER.match(secret) is None


def _basic_credentials(secret: str) -> bool:
    """``user:password`` once decoded; anything else that follows the word ``basic`` is not."""
    try:
        decoded = b64decode(secret + "=" * (-len(secret) % 4), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon and user and password and decoded.isprintable() and _not_placeholder(password))


def _token_like(secret: str) -> bool:
    return bool(_HAS_DIGIT.search(secret) and _HAS_LETTER.search(secret)) and shannon_entropy(secret) >= 3.0


def _generic_secret(secret: str) -> bool:
    """A value worth refusing: token-like, and not a placeholder, a reference or a path."""
    if not _token_like(secret) or not _not_placeholder(secret):
        return False
    return not (_DOTTED_NAME.match(secret) or _URL.match(secret) or _PATHLIKE.match(secret))


_GENERIC_KEYS = (
    r"passw(?:or)?d|passphrase|pwd|secret|api[_.-]?key|access[_.-]?key|private[_.-]?key|signing[_.-]?key"
    r"|auth[_.-]?token|access[_.-]?token|refresh[_.-]?token|session[_.-]?token|token|credentials?"
    r"|accountkey|sharedaccesskey"
)
# The words the name alternatives start with: the rule is tried where one of them occurs.
_GENERIC_ANCHORS = ["passw", "passphrase", "pwd", "secret", "api", "access", "private", "signing", "auth",
                    "refresh", "session", "token", "credential", "accountkey", "sharedaccesskey"]


def skald_rules() -> tuple[Rule, ...]:
    """The rules Skald adds to the vendored set (source ``skald``)."""
    return (
        Rule.build(
            id="private-key-block", source=SOURCE_SKALD, keywords=["-----begin", "putty-user-key-file"],
            description="A PEM private key header (the body may be cut off), or a PuTTY key file.",
            pattern=re.compile(r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-[23]: ",
                               re.ASCII),
        ),
        Rule.build(
            id="url-password", source=SOURCE_SKALD, keywords=["://"], check=_not_placeholder, anchored=True, lead=32,
            description="A URL or connection string with a password (postgres://user:pw@host, redis://:pw@host).",
            pattern=re.compile(r"://[^\s:/?#@'\"<>]{0,128}:([^\s/?#@'\"<>]{1,256})@[A-Za-z0-9\[._-]", re.ASCII),
        ),
        Rule.build(
            id="azure-storage-connection-string", source=SOURCE_SKALD, keywords=["accountkey=", "sharedaccesskey="],
            description="An Azure storage or service bus connection string with its account or access key.",
            pattern=re.compile(r"(?i:AccountKey|SharedAccessKey)=([A-Za-z0-9+/]{40,100}={0,2})(?![A-Za-z0-9+/=])",
                               re.ASCII),
        ),
        Rule.build(
            id="authorization-basic", source=SOURCE_SKALD, keywords=["basic"], check=_basic_credentials,
            anchored=True,
            description="HTTP basic authorisation: base64 of user:password after the word Basic.",
            pattern=re.compile(r"(?<![\w-])(?i:basic)[ \t]{1,5}([A-Za-z0-9+/]{6,2048}={0,2})(?![A-Za-z0-9+/=])",
                               re.ASCII),
        ),
        Rule.build(
            id="authorization-bearer", source=SOURCE_SKALD, keywords=["bearer"], check=_token_like, anchored=True,
            description="An HTTP bearer token.",
            pattern=re.compile(r"(?<![\w-])(?i:bearer)[ \t]{1,5}([A-Za-z0-9._~+/-]{16,4096}=*)", re.ASCII),
        ),
        Rule.build(
            id="generic-secret", source=SOURCE_SKALD, keywords=_GENERIC_ANCHORS, check=_generic_secret,
            anchored=True, lead=40,
            description="A value assigned to a secret-sounding name (password=, api_key:, token =>) that has "
                        "letters and digits and at least 3 bits of entropy per character.",
            pattern=re.compile(
                rf"(?i:(?:{_GENERIC_KEYS})[\w.-]{{0,20}})[\"']?[ \t]{{0,5}}(?::=|=>|->|=|:)[ \t]{{0,5}}"
                r"(?:[\"'`]|b[\"'])?([^\s\"'`,;<>(){}\[\]]{8,200})",
                re.ASCII,
            ),
        ),
    )
