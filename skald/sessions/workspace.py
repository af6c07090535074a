"""The session workspace: a shared, durable file store in the database (no shared filesystem).

Any worker on any machine reads and writes the same files; content is stored once by its SHA-256
(`WorkspaceBlob`) and every write or delete appends an audit row naming the digest. One resolver
serves the file tools and the approval diff preview, so a preview shows exactly what the tool would
read — on whichever worker it is made.

`execute_cmd` needs a directory: :func:`workspace_materialise` writes the session's files into the
worker's local root (``SKALD_WORKSPACE_ROOT``, a cache, never the truth) and
:func:`workspace_sync_back` records what the command created, changed or deleted. Only regular
files are read back; a symlink or a device the command made is ignored, never followed.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.errors import ToolError
from skald.core import clock
from skald.models import WorkspaceBlob, WorkspaceFile

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


def workspace_write(*, session_id: int, path: str, data: bytes, actor: Actor) -> WorkspaceFile:
    """Create or replace a file: the blob (once per digest), the file row and its audit row in one
    transaction. Writing the same content again changes nothing and audits nothing."""
    normal = normalise_path(path)
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"content is larger than {MAX_FILE_BYTES} bytes", code="file_too_large")
    digest = _digest(data)
    with transaction.atomic():
        blob, _ = WorkspaceBlob.objects.get_or_create(digest=digest, defaults={"size": len(data), "content": data})
        row = WorkspaceFile.objects.select_for_update().filter(session_id=session_id, path=normal).first()
        now = clock.now()
        created = False
        if row is None:
            try:
                with transaction.atomic():
                    row = WorkspaceFile.objects.create(session_id=session_id, path=normal, blob=blob, updated_at=now)
                created = True
            except IntegrityError:
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


def workspace_delete(*, session_id: int, path: str, actor: Actor) -> bool:
    """Remove a file (audited); ``False`` when there was none."""
    normal = normalise_path(path)
    with transaction.atomic():
        row = WorkspaceFile.objects.select_for_update().filter(session_id=session_id, path=normal).first()
        if row is None:
            return False
        digest = row.blob_id
        row.delete()
        audit_append(actor=actor, kind=AuditKind.WORKSPACE_FILE_DELETED, subject_type="session",
                     subject_id=session_id, payload={"path": normal, "digest": digest})
    return True


@dataclass(frozen=True, slots=True)
class Materialised:
    """A session's files as written into a local directory: path → digest."""

    root: Path
    digests: dict[str, str]


def workspace_materialise(*, session_id: int, root: Path | None = None) -> Materialised:
    """Write the session's files into ``root`` (default: this worker's directory for the session),
    replacing whatever an earlier command on this worker left there."""
    target = root or workspace_for(session_id)
    if target.exists():
        shutil.rmtree(target)  # removes links without following them
    target.mkdir(parents=True)
    digests: dict[str, str] = {}
    for row in WorkspaceFile.objects.filter(session_id=session_id).select_related("blob"):
        local = resolve_in_workspace(target, row.path)
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(bytes(row.blob.content))
        digests[row.path] = row.blob_id
    return Materialised(root=target, digests=digests)


def workspace_sync_back(*, session_id: int, materialised: Materialised, actor: Actor) -> list[str]:
    """Record what a command did to the local copy: new and changed regular files are written,
    vanished ones deleted. Returns the paths that changed."""
    changed: list[str] = []
    present = _local_files(materialised.root)
    for relative in sorted(present)[:MAX_SYNCED_FILES]:
        local = materialised.root / relative
        if local.stat().st_size > MAX_FILE_BYTES:
            continue  # too large to keep: the command's output says what it made
        data = local.read_bytes()
        if materialised.digests.get(relative) != _digest(data):
            workspace_write(session_id=session_id, path=relative, data=data, actor=actor)
            changed.append(relative)
    for relative in sorted(set(materialised.digests) - set(present)):
        if workspace_delete(session_id=session_id, path=relative, actor=actor):
            changed.append(relative)
    return changed


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
