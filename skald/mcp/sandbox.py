"""stdio MCP servers in the exec sandbox (bubblewrap), when ``SKALD_MCP_STDIO_SANDBOX=auto`` and a
trial run works here (docs/mcp.md, "Confinement").

A confined server sees what a confined command sees (:mod:`loop.tools.sandbox`: ``/usr`` and a few
files of ``/etc`` read-only, a fresh ``/tmp``, its own ``/proc``, no network) with its directory
``SKALD_WORKSPACE_ROOT/mcp-{name}`` read-write at ``/workspace``, and, read-only, only what its
program needs to start (:func:`grants`):

- the program (``argv[0]``);
- when the program is a virtualenv's interpreter (``pyvenv.cfg`` beside its ``bin/``): that
  virtualenv, and the base interpreter's installation named by its ``home``;
- when the program resolves to a Python interpreter: that interpreter's installation (its stdlib);
- each argument that is an absolute path to an existing file (a script): that file alone.

No CPU-time or address-space limit (a long-lived server would hit them); the file size, open files
and process limits of the exec sandbox apply.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings

from loop.tools.sandbox import Bubblewrap, Limits

MODES = ("auto", "off")


def _limits() -> Limits:
    return Limits(cpu_seconds=0, memory_bytes=0, file_bytes=settings.SKALD_EXEC_FILE_MB * 1024 * 1024,
                  open_files=settings.SKALD_EXEC_OPEN_FILES, processes=settings.SKALD_EXEC_PROCESSES)


def _interpreter_home(venv: Path) -> str | None:
    for line in (venv / "pyvenv.cfg").read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return str(Path(value.strip()).parent)  # home names the base interpreter's bin/
    return None


def grants(argv: Sequence[str]) -> tuple[str, ...]:
    """The host paths a stdio server's program needs, read-only (see the module docstring)."""
    program = Path(argv[0])
    paths = [str(program)]
    venv = program.parent.parent
    if (venv / "pyvenv.cfg").is_file():
        paths.append(str(venv))
        home = _interpreter_home(venv)
        if home:
            paths.append(home)
    real = program.resolve()
    if real.name.startswith("python"):
        paths.append(str(real.parent.parent))
    paths += [arg for arg in argv[1:] if os.path.isabs(arg) and os.path.isfile(arg)]
    return tuple(dict.fromkeys(paths))


def stdio_confinement(argv: Sequence[str]) -> Bubblewrap | None:
    """The sandbox a stdio server with ``argv`` starts in, or None (off, or no bubblewrap here)."""
    if settings.SKALD_MCP_STDIO_SANDBOX != "auto":
        return None
    sandbox = Bubblewrap.find(limits=_limits(), network=False, uid=settings.SKALD_EXEC_UID)
    return None if sandbox is None else dataclasses.replace(sandbox, read_only=grants(argv))
