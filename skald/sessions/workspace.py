"""The session workspace: a shared, durable file store in the database (no shared filesystem).

Any worker on any machine reads and writes the same files; content is stored once by its SHA-256
(`WorkspaceBlob`) and every write or delete appends an audit row naming the digest. One resolver
serves the file tools and the approval diff preview, so a preview shows exactly what the tool would
read — on whichever worker it is made.

`execute_cmd` needs a directory: :func:`workspace_materialise` writes the session's files into the
worker's local root (``SKALD_WORKSPACE_ROOT``, a cache, never the truth) and
:func:`workspace_sync_back` records what the command created, changed or deleted. Only regular
files are read back; a symlink or a device the command made is ignored, never followed.

Writes after a command are compare-and-sets: :func:`workspace_materialise` records each file's
version and digest (:class:`Stamp`), :func:`workspace_sync_back` changes a path only where the
stored file is still that one, and holds the driver's fence in the same transaction, so a worker
taken over while its command ran (a zombie) writes nothing. :func:`workspace_discard` removes the
local copy when the command ends.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from django.conf import settings
from django.db import IntegrityError, transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.errors import ToolError
from skald.core import clock
from skald.models import WorkspaceBlob, WorkspaceFile
from skald.sessions.effects import effect_refused_record, refused_when_taken_over

MAX_FILE_BYTES = 1024 * 1024
MAX_PATH_CHARS = 512
MAX_SYNCED_FILES = 500  # a command that leaves more files behind records only the first ones (sorted)


def workspace_for(session_id: int) -> Path:
    """The worker-local directory a command of the session runs in (a materialisation)."""
    return Path(settings.SKALD_WORKSPACE_ROOT) / f"session-{session_id}"


def normalise_path(relative: object) -> str:
    """The canonical form of a workspace path (``a/b.md``); traversal, absolute paths, NUL bytes and
    empty paths refuse with a model-visible ToolError."""
    if not isinstance(relative, str) or not relative.strip() or "\x00" in relative:
        raise ToolError("path must be a non-empty relative path", code="path_invalid")
    if len(relative) > MAX_PATH_CHARS:
        raise ToolError(f"path is longer than {MAX_PATH_CHARS} characters", code="path_invalid")
    unified = relative.replace("\\", "/")
    if unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        raise ToolError("path must be relative to the session workspace", code="path_outside_workspace")
    normal = posixpath.normpath(unified)
    if normal == "." or normal.startswith("../") or normal == "..":
        raise ToolError("path escapes the session workspace", code="path_outside_workspace")
    return normal


def resolve_in_workspace(workspace: Path, relative: str) -> Path:
    """Resolve ``relative`` inside a local ``workspace`` directory; traversal and symlink escapes refuse."""
    candidate = Path(normalise_path(relative))
    workspace.mkdir(parents=True, exist_ok=True)
    root = Path(os.path.realpath(workspace))
    # realpath follows every symlink on the way, including the final component if it exists.
    resolved = Path(os.path.realpath(root / candidate))
    if resolved != root and root not in resolved.parents:
        raise ToolError("path escapes the session workspace", code="path_outside_workspace")
    return resolved


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def workspace_read(*, session_id: int, path: str) -> str | None:
    """The current text of a workspace file, or None when it does not exist."""
    normal = normalise_path(path)
    row = WorkspaceFile.objects.filter(session_id=session_id, path=normal).select_related("blob").first()
    if row is None:
        return None
    if row.blob.size > MAX_FILE_BYTES:
        raise ToolError(f"{normal} is larger than {MAX_FILE_BYTES} bytes", code="file_too_large")
    return bytes(row.blob.content).decode("utf-8", errors="replace")


def read_current(session_id: int, path: str) -> str | None:
    """What ``read_file`` would return now (``None``: no such file) — the preview's source."""
    return workspace_read(session_id=session_id, path=path)


class Fence(Protocol):
    """A driver's fence (``loop.store.Store.fenced(...)``): inside the effect's transaction it
    refuses with ``LeaseLost`` once another driver took the exchange over."""

    def hold_fence(self, session_id: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Stamp:
    """A stored file as a command started from it: its version and content digest. Both are
    compared: a path deleted and created again starts at version 1 once more."""

    version: int
    digest: str


class _Unchecked(Enum):
    ANY = "any"  # a write that replaces whatever is stored (write_file, an operator's put)


Expected = Stamp | None | _Unchecked  # None: the path did not exist


def _stamp(row: WorkspaceFile | None) -> Stamp | None:
    return None if row is None else Stamp(row.version, row.blob_id)


def _locked_row(session_id: int, normal: str) -> WorkspaceFile | None:
    return WorkspaceFile.objects.select_for_update().filter(session_id=session_id, path=normal).first()


def _store(*, session_id: int, normal: str, data: bytes, actor: Actor,
           expect: Expected = _Unchecked.ANY) -> WorkspaceFile | None:
    """Create or replace a file inside the caller's transaction, audited; ``None`` (nothing written)
    when ``expect`` is a version and the stored one is another (compare-and-set)."""
    checked = expect is not _Unchecked.ANY
    row = _locked_row(session_id, normal)
    if checked and _stamp(row) != expect:
        return None
    digest = _digest(data)
    blob, _ = WorkspaceBlob.objects.get_or_create(digest=digest, defaults={"size": len(data), "content": data})
    now = clock.now()
    created = False
    if row is None:
        try:
            with transaction.atomic():
                row = WorkspaceFile.objects.create(session_id=session_id, path=normal, blob=blob, updated_at=now)
            created = True
        except IntegrityError:
            if checked:
                return None  # another writer created the path after the command started from none
            # A concurrent writer created the path first (no row existed to lock): this write
            # becomes the next version of it, like a sequential one.
            row = WorkspaceFile.objects.select_for_update().get(session_id=session_id, path=normal)
    if not created and row.blob_id == digest:
        return row
    if not created:
        row.blob, row.version, row.updated_at = blob, row.version + 1, now
        row.save(update_fields=["blob", "version", "updated_at"])
    audit_append(actor=actor, kind=AuditKind.WORKSPACE_FILE_WRITTEN, subject_type="session",
                 subject_id=session_id, payload={"path": normal, "digest": digest, "bytes": len(data),
                                                 "version": row.version})
    return row


def _remove(*, session_id: int, normal: str, actor: Actor, expect: Expected = _Unchecked.ANY) -> bool | None:
    """Delete inside the caller's transaction, audited: whether there was a file; ``None`` when
    ``expect`` is a version and the stored one is another (nothing deleted)."""
    row = _locked_row(session_id, normal)
    if expect is not _Unchecked.ANY and row is not None and _stamp(row) != expect:
        return None
    if row is None:
        return False
    digest = row.blob_id
    row.delete()
    audit_append(actor=actor, kind=AuditKind.WORKSPACE_FILE_DELETED, subject_type="session",
                 subject_id=session_id, payload={"path": normal, "digest": digest})
    return True


def workspace_write(*, session_id: int, path: str, data: bytes, actor: Actor,
                    fence: Fence | None = None) -> WorkspaceFile:
    """Create or replace a file: the blob (once per digest), the file row and its audit row in one
    transaction. Writing the same content again changes nothing and audits nothing.

    ``fence``: the calling driver's; the write refuses (``LeaseLost``, nothing written) once its
    lease was taken over."""
    normal = normalise_path(path)
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"content is larger than {MAX_FILE_BYTES} bytes", code="file_too_large")
    with transaction.atomic():
        if fence is not None:
            fence.hold_fence(session_id)
        row = _store(session_id=session_id, normal=normal, data=data, actor=actor)
    assert row is not None  # an unchecked write always lands
    return row


def workspace_delete(*, session_id: int, path: str, actor: Actor) -> bool:
    """Remove a file (audited); ``False`` when there was none."""
    normal = normalise_path(path)
    with transaction.atomic():
        return bool(_remove(session_id=session_id, normal=normal, actor=actor))


@dataclass(frozen=True, slots=True)
class Materialised:
    """A session's files as written into a local directory: path → the stamp the command starts from."""

    root: Path
    stamps: dict[str, Stamp]

    @property
    def digests(self) -> dict[str, str]:
        return {path: stamp.digest for path, stamp in self.stamps.items()}


def workspace_materialise(*, session_id: int, root: Path | None = None) -> Materialised:
    """Write the session's files into ``root`` (default: this worker's directory for the session),
    replacing whatever an earlier command on this worker left there. Remove it with
    :func:`workspace_discard` when the command ends."""
    target = root or workspace_for(session_id)
    if target.exists():
        shutil.rmtree(target)  # removes links without following them
    target.mkdir(parents=True)
    stamps: dict[str, Stamp] = {}
    for row in WorkspaceFile.objects.filter(session_id=session_id).select_related("blob"):
        local = resolve_in_workspace(target, row.path)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(bytes(row.blob.content))
        stamps[row.path] = Stamp(row.version, row.blob_id)
    return Materialised(root=target, stamps=stamps)


def workspace_discard(materialised: Materialised) -> None:
    """Remove a materialisation: a session's files never stay on a worker's disk after its command."""
    shutil.rmtree(materialised.root, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class SyncBack:
    """What a command's sync-back did: the paths applied, and those refused (``reason`` says why:
    ``stale_version``, the stored file is no longer the one the command started from, or
    ``lease_lost``, the driver was taken over and nothing at all was applied)."""

    changed: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    reason: str = ""


def workspace_sync_back(*, session_id: int, materialised: Materialised, actor: Actor,
                        fence: Fence | None = None, tool: str = "execute_cmd", call_key: str = "") -> SyncBack:
    """Record what a command did to the local copy, as compare-and-sets against the versions it
    started from: a new, changed or vanished file is written or deleted only where the stored file
    is still the starting one; the others are refused, never applied, and the refusal recorded
    (:func:`~skald.sessions.effects.effect_refused_record`) in the same transaction. Fenced by the
    driver's ``fence`` when given: after a lost lease nothing lands, the refusal is recorded in a
    transaction of its own and ``LeaseLost`` is raised."""
    writes: list[tuple[str, bytes]] = []
    present = _local_files(materialised.root)
    for relative in sorted(present)[:MAX_SYNCED_FILES]:
        local = materialised.root / relative
        if local.stat().st_size > MAX_FILE_BYTES:
            continue  # too large to keep: the command's output says what it made
        data = local.read_bytes()
        start = materialised.stamps.get(relative)
        if start is None or start.digest != _digest(data):
            writes.append((relative, data))
    deletes = sorted(set(materialised.stamps) - set(present))
    if not writes and not deletes:
        return SyncBack()
    with refused_when_taken_over(session_id=session_id, tool=tool, call_key=call_key,
                                 targets=[path for path, _ in writes] + deletes, actor=actor):
        changed, refused = _apply(session_id, materialised, writes, deletes, actor=actor, fence=fence, tool=tool,
                                  call_key=call_key)
    return SyncBack(changed=changed, refused=refused, reason="stale_version" if refused else "")


def _apply(session_id: int, materialised: Materialised, writes: list[tuple[str, bytes]], deletes: list[str], *,
           actor: Actor, fence: Fence | None, tool: str, call_key: str) -> tuple[list[str], list[str]]:
    changed: list[str] = []
    refused: list[str] = []
    with transaction.atomic():
        if fence is not None:
            fence.hold_fence(session_id)
        for relative, data in writes:
            row = _store(session_id=session_id, normal=normalise_path(relative), data=data, actor=actor,
                         expect=materialised.stamps.get(relative))
            (changed if row is not None else refused).append(relative)
        for relative in deletes:
            removed = _remove(session_id=session_id, normal=relative, actor=actor,
                              expect=materialised.stamps[relative])
            if removed is None:
                refused.append(relative)
            elif removed:
                changed.append(relative)
        if refused:
            effect_refused_record(session_id=session_id, tool=tool, call_key=call_key, targets=refused,
                                  reason="stale_version", actor=actor)
    return changed, refused


def _local_files(root: Path) -> set[str]:
    """Regular files under ``root`` as workspace paths; symlinks and special files are skipped."""
    found: set[str] = set()
    for directory, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            full = Path(directory) / name
            if full.is_symlink() or not full.is_file():
                continue
            found.add(full.relative_to(root).as_posix())
    return found
