"""Injection provenance (issue 30, docs/provenance.md): pure, over stored rows, no model.

**Labels.** Every ``tool_result`` row is ``trusted`` unless its payload says ``"trust":
"untrusted"``. The label is written with the row (``loop.store_calls.CallLog.result``) from what the
tool declares (:func:`tool_trust`), from the file it read (:func:`path_tainted`: a workspace path
written by a call made in a tainted frame), or from a child frame's taint (a delegate's
``subagent_result`` carries its child's label). A ``compaction`` row carries the label of the rows
it covers.

**Taint.** A narrative (a frame's context) is tainted from the first untrusted row in it; nothing
clears it. :func:`compute` derives, for one call, the taint, the untrusted source rows (seq, tool,
MCP server, suspected instructions found in them) and, for each argument value (and each IBAN,
phone number, URL or e-mail address inside one), where it occurs in an untrusted result — compared
after normalising case and whitespace, and without separators for identifiers (an IBAN typed
``DE89 3704 …`` matches ``de8937 04…``). Everything is recomputed from rows: after a crash, and by
replay-verify (:func:`provenance_mismatches`), the answer is the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

TRUSTED = "trusted"
UNTRUSTED = "untrusted"
PROVENANCE_KIND = "control:provenance"
SUSPECT_KIND = "control:injection_suspect"
FRAME_OPENED_KIND = "control:frame_opened"
_LABELLED = ("tool_result", "subagent_result", "compaction")
MIN_MATCH_CHARS = 4  # shorter argument values ("yes", "42") are not matched: they occur everywhere
MIN_COMPACT_CHARS = 6
_MAX_MATCHES = 50


class Row(Protocol):
    """A stored narrative row as provenance reads it (``loop.verify.StoredEvent`` is one)."""

    @property
    def seq(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> Any: ...

    @property
    def narrative(self) -> str: ...


@dataclass(frozen=True, slots=True)
class EventRowView:
    seq: int
    kind: str
    payload: Any
    narrative: str


def tool_trust(tool: object) -> str:
    """What a tool declares (``trust`` attribute, ``trusted`` when absent; an MCP tool's proxy has
    ``trusted``): the label its results get."""
    declared = getattr(tool, "trust", None)
    if declared is not None:
        return UNTRUSTED if declared == UNTRUSTED else TRUSTED
    trusted = getattr(tool, "trusted", None)
    if trusted is not None:
        return TRUSTED if trusted is True else UNTRUSTED
    return TRUSTED


def tool_read_only(tool: object, arguments: Mapping[str, Any] | None = None,
                   lookup: Callable[[str], object | None] | None = None) -> bool:
    """A tool's declared ``read_only`` (else its ``concurrency_safe``).

    A delegate (``delegates_to``: the tools its child may use) is read-only when every tool its child
    can get (those of the calling frame, ``lookup``) is; a nested delegate counts as read-only, since
    a child inherits its parent's taint (:func:`narrative_sources`) and each of its calls is gated
    under it. An agent that cannot be resolved is not read-only (fail-closed)."""
    reach = getattr(tool, "delegates_to", None)
    if callable(reach):
        if lookup is None:
            return False
        try:
            names = reach(arguments or {})
        except Exception:  # noqa: BLE001 - an agent that cannot be resolved is not read-only
            return False
        found = [lookup(name) for name in names]
        return all(getattr(t, "delegates_to", None) is not None or tool_read_only(t) for t in found if t is not None)
    declared = getattr(tool, "read_only", None)
    if declared is not None:
        return bool(declared)
    return bool(getattr(tool, "concurrency_safe", False))


def server_of(tool: str) -> str | None:
    """``mcp__{server}__{tool}`` → server (the kernel knows the naming, not the MCP package)."""
    if tool.startswith("mcp__"):
        parts = tool.split("__")
        if len(parts) >= 3 and parts[1]:
            return parts[1]
    return None


def is_untrusted(row: Row) -> bool:
    return row.kind in _LABELLED and isinstance(row.payload, Mapping) and row.payload.get("trust") == UNTRUSTED


# --- normalisation ------------------------------------------------------------------------------


def normalised(text: str) -> tuple[str, list[int]]:
    """Case-folded, whitespace runs as one space; with each output char's index in ``text``."""
    out: list[str] = []
    where: list[int] = []
    space = False
    for index, char in enumerate(text):
        if char.isspace():
            if not space and out:
                out.append(" ")
                where.append(index)
            space = True
            continue
        space = False
        for folded in char.casefold():
            out.append(folded)
            where.append(index)
    while out and out[-1] == " ":
        out.pop()
        where.pop()
    return "".join(out), where


def compact(text: str) -> tuple[str, list[int]]:
    """Letters and digits only, case-folded: separators in IBANs, phone numbers and URLs removed."""
    out: list[str] = []
    where: list[int] = []
    for index, char in enumerate(text):
        if char.isalnum():
            for folded in char.casefold():
                out.append(folded)
                where.append(index)
    return "".join(out), where


def _strip_scheme(text: str) -> str:
    return re.sub(r"^(?:https?|ftp)://(?:www\.)?", "", text.strip(), flags=re.IGNORECASE).rstrip("/")


_ENTITIES = (
    ("iban", re.compile(r"\b[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]{2,4}){3,8}\b", re.IGNORECASE)),
    ("url", re.compile(r"\b(?:https?://|www\.)[^\s<>\"')\]]+", re.IGNORECASE)),
    ("email", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    ("phone", re.compile(r"(?<![\w])\+?\d[\d ()./-]{6,}\d\b")),
)


def entities(text: str) -> list[tuple[str, str]]:
    """The identifiers inside a longer value: ``(kind, text)``."""
    found: list[tuple[str, str]] = []
    for kind, pattern in _ENTITIES:
        for m in pattern.finditer(text):
            value = m.group(0)
            if kind == "phone" and sum(c.isdigit() for c in value) < 7:
                continue
            found.append((kind, value))
    return found


# --- provenance ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Source:
    seq: int
    key: str
    tool: str
    server: str | None
    kind: str  # tool_result | subagent_result | compaction
    suspects: tuple[Mapping[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "key": self.key, "tool": self.tool, "server": self.server, "kind": self.kind,
                "suspects": [dict(s) for s in self.suspects]}


@dataclass(frozen=True, slots=True)
class ArgumentMatch:
    path: str  # the argument's dotted path
    value: str  # the argument value, or the identifier inside it, that was found
    seq: int  # the untrusted result it occurs in
    tool: str
    start: int  # span in that result's content
    end: int
    how: str  # exact | normalised | separators
    suspect: bool  # the result it came from has a suspected instruction

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "value": self.value, "seq": self.seq, "tool": self.tool, "start": self.start,
                "end": self.end, "how": self.how, "suspect": self.suspect}


@dataclass(frozen=True, slots=True)
class Provenance:
    tainted: bool
    sources: tuple[Source, ...] = ()
    arguments: tuple[ArgumentMatch, ...] = ()
    read_only: bool = False

    @property
    def injection_suspected(self) -> bool:
        return any(source.suspects for source in self.sources)

    @property
    def argument_from_untrusted(self) -> bool:
        return bool(self.arguments)

    @property
    def argument_from_suspect(self) -> bool:
        return any(match.suspect for match in self.arguments)

    def facts(self) -> dict[str, str]:
        """The ``$provenance.*`` facts rules may match (strings, as the engine compares them)."""
        return {"tainted": _flag(self.tainted), "argument_from_untrusted": _flag(self.argument_from_untrusted),
                "injection_suspected": _flag(self.injection_suspected),
                "argument_from_suspect": _flag(self.argument_from_suspect), "read_only": _flag(self.read_only)}

    def as_dict(self) -> dict[str, Any]:
        return {"tainted": self.tainted, "sources": [s.as_dict() for s in self.sources],
                "arguments": [a.as_dict() for a in self.arguments], "read_only": self.read_only,
                "injection_suspected": self.injection_suspected,
                "argument_from_untrusted": self.argument_from_untrusted,
                "argument_from_suspect": self.argument_from_suspect}


UNTAINTED = Provenance(False)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _inherited(rows: Sequence[Row], narrative: str, before_seq: int | None) -> dict[str, int | None]:
    """The narratives whose untrusted rows a narrative sees, each up to a seq: its own, and its
    parent's before the child frame opened (``control:frame_opened`` names ``parent_narrative``), and
    so on up the tree. A child's task is written by its parent: it inherits the parent's taint."""
    seen: dict[str, int | None] = {narrative: before_seq}
    current, limit = narrative, before_seq
    for _ in range(16):  # deeper than any frame tree (MAX_AGENT_DEPTH)
        opened = next((row for row in rows if row.kind == FRAME_OPENED_KIND and row.narrative == current
                       and isinstance(row.payload, Mapping) and "parent_narrative" in row.payload
                       and (limit is None or row.seq < limit)), None)
        if opened is None:
            break
        current, limit = str(opened.payload["parent_narrative"]), opened.seq
        if current in seen:
            break
        seen[current] = limit
    return seen


def narrative_sources(rows: Sequence[Row], *, narrative: str, before_seq: int | None = None) -> list[Source]:
    """The untrusted rows one narrative sees (before ``before_seq``), each with its suspects."""
    suspects: dict[int, list[Mapping[str, Any]]] = {}
    sources: list[tuple[Row, str]] = []
    visible = _inherited(rows, narrative, before_seq)
    for row in rows:
        if before_seq is not None and row.seq >= before_seq:
            continue
        if row.kind == SUSPECT_KIND and isinstance(row.payload, Mapping):
            suspects.setdefault(int(row.payload.get("result_seq", 0)), []).append({**row.payload, "seq": row.seq})
        elif row.narrative in visible and (visible[row.narrative] is None or row.seq < (visible[row.narrative] or 0)) \
                and is_untrusted(row):
            payload = row.payload
            tool = str(payload.get("name") or payload.get("agent") or row.kind)
            sources.append((row, tool))
    return [Source(seq=row.seq, key=str(row.payload.get("key", "")), tool=tool, server=server_of(tool),
                   kind=row.kind, suspects=tuple(_suspect_view(s) for s in suspects.get(row.seq, ())))
            for row, tool in sources]


def _suspect_view(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"seq": payload.get("seq"), "kind": payload.get("kind"), "start": payload.get("start"),
            "end": payload.get("end"), "score": payload.get("score"), "excerpt": payload.get("excerpt")}


def compute(rows: Sequence[Row], *, narrative: str, arguments: Mapping[str, Any], read_only: bool = False,
            before_seq: int | None = None) -> Provenance:
    """One call's provenance from the session's stored rows (pure)."""
    sources = narrative_sources(rows, narrative=narrative, before_seq=before_seq)
    if not sources:
        return Provenance(False, read_only=read_only)
    contents = {row.seq: _content(row) for row in rows if any(row.seq == s.seq for s in sources)}
    suspect_seqs = {s.seq for s in sources if s.suspects}
    tools = {s.seq: s.tool for s in sources}
    matches = match_arguments(arguments, [(seq, contents[seq]) for seq in sorted(contents)])
    found = tuple(ArgumentMatch(path, value, seq, tools[seq], start, end, how, seq in suspect_seqs)
                  for path, value, seq, start, end, how in matches)
    return Provenance(True, tuple(sources), found, read_only)


def _content(row: Row) -> str:
    payload = row.payload if isinstance(row.payload, Mapping) else {}
    return str(payload.get("content") if row.kind != "compaction" else payload.get("summary") or "")


def leaves(value: Any, path: str = "") -> Iterable[tuple[str, str]]:
    """Every scalar of an argument object with its dotted path (as rules address arguments)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}.{index}" if path else str(index))
    elif isinstance(value, str):
        yield path, value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield path, str(value)


def match_arguments(arguments: Mapping[str, Any], contents: Sequence[tuple[int, str]]
                    ) -> list[tuple[str, str, int, int, int, str]]:
    """``(path, value, seq, start, end, how)`` for each argument value (or identifier inside one)
    that occurs in an untrusted content; the first occurrence per value, oldest result first."""
    prepared = [(seq, text, normalised(text), compact(text)) for seq, text in contents]
    found: list[tuple[str, str, int, int, int, str]] = []
    for path, value in leaves(arguments):
        candidates = [value] + [text for _kind, text in entities(value) if text != value]
        for candidate in candidates:
            hit = _find(candidate, prepared)
            if hit is not None:
                found.append((path, candidate, *hit))
                if candidate == value:
                    break  # the whole value came from there: the identifiers inside it did too
            if len(found) >= _MAX_MATCHES:
                return found
    return found


def _find(value: str, prepared: Sequence[tuple[int, str, tuple[str, list[int]], tuple[str, list[int]]]]
          ) -> tuple[int, int, int, str] | None:
    stripped = value.strip()
    if len(stripped) < MIN_MATCH_CHARS:
        return None
    needle_norm = normalised(stripped)[0]
    looks_like_url = bool(re.match(r"^(?:https?://|www\.)", stripped, re.IGNORECASE))
    needle_compact = compact(_strip_scheme(stripped) if looks_like_url else stripped)[0]
    for seq, text, (norm, norm_at), (packed, packed_at) in prepared:
        at = text.find(stripped)
        if at >= 0:
            return seq, at, at + len(stripped), "exact"
        at = norm.find(needle_norm)
        if at >= 0:
            return seq, norm_at[at], norm_at[at + len(needle_norm) - 1] + 1, "normalised"
        if len(needle_compact) >= MIN_COMPACT_CHARS and _identifier_like(stripped):
            at = packed.find(needle_compact)
            if at >= 0:
                return seq, packed_at[at], packed_at[at + len(needle_compact) - 1] + 1, "separators"
    return None


def _identifier_like(value: str) -> bool:
    """An IBAN, phone number, URL, e-mail, account or reference: compared without separators. Prose
    is not (two sentences that differ only in punctuation are not "the same value")."""
    if re.match(r"^(?:https?://|www\.)", value, re.IGNORECASE):
        return True
    digits = sum(c.isdigit() for c in value)
    return " " not in value.strip() or digits * 2 >= sum(c.isalnum() for c in value)


# --- file and compaction labels -----------------------------------------------------------------


def path_tainted(rows: Iterable[Row], path: str) -> int | None:
    """The seq of the provenance row of a tainted write to ``path`` in this session, if any."""
    want = _path_key(path)
    for row in rows:
        if row.kind == PROVENANCE_KIND and isinstance(row.payload, Mapping) and row.payload.get("tainted"):
            writes = row.payload.get("writes")
            if isinstance(writes, str) and _path_key(writes) == want:
                return row.seq
    return None


def _path_key(path: str) -> str:
    parts = [p for p in str(path).replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


def covered_trust(rows: Iterable[Row], *, narrative: str, first_seq: int, last_seq: int) -> str:
    """A compaction summary's label: untrusted when any row it covers is."""
    for row in rows:
        if row.narrative == narrative and first_seq <= row.seq <= last_seq and is_untrusted(row):
            return UNTRUSTED
    return TRUSTED


# --- replay-verify ------------------------------------------------------------------------------


def provenance_mismatches(rows: Sequence[Row], arguments_of: Mapping[str, Mapping[str, Any]]
                          ) -> list[dict[str, Any]]:
    """Each stored ``control:provenance`` row recomputed from the rows before it; a row that does
    not agree is a finding. ``arguments_of`` maps a call key to its stored arguments."""
    found: list[dict[str, Any]] = []
    for row in rows:
        if row.kind != PROVENANCE_KIND or not isinstance(row.payload, Mapping):
            continue
        stored = row.payload
        key = str(stored.get("key", ""))
        if key not in arguments_of:
            found.append({"field": "provenance", "seq": row.seq, "key": key, "problem": "no such call"})
            continue
        again = compute(rows, narrative=row.narrative, arguments=arguments_of[key],
                        read_only=bool(stored.get("read_only")), before_seq=row.seq).as_dict()
        for name in ("tainted", "sources", "arguments", "argument_from_suspect"):
            if _comparable(again.get(name)) != _comparable(stored.get(name)):
                found.append({"field": "provenance", "seq": row.seq, "key": key, "part": name,
                              "stored": stored.get(name), "recomputed": again.get(name)})
                break
    return found


def _comparable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _comparable(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    return value
