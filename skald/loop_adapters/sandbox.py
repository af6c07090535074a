"""The deployment's exec sandbox, from settings (docs/production.md, "Sandbox").

Bubblewrap when ``SKALD_EXEC_SANDBOX=auto`` and a trial run works here; otherwise commands run
unconfined, which only ``SKALD_EXEC_UNCONFINED_OK`` accepts (its default follows the embedded
profile: on with ``SKALD_DEBUG``, off in production unless set). Anywhere else ``execute_cmd`` is
refused before it touches the disk, and ``check --deploy`` fails (``skald.E011``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from loop.errors import ToolError
from loop.tools.sandbox import Bubblewrap, Limits, Sandbox, Unconfined

MODES = ("auto", "off")
_MIB = 1024 * 1024


def exec_limits() -> Limits:
    return Limits(cpu_seconds=settings.SKALD_EXEC_CPU_SECONDS, memory_bytes=settings.SKALD_EXEC_MEMORY_MB * _MIB,
                  file_bytes=settings.SKALD_EXEC_FILE_MB * _MIB, open_files=settings.SKALD_EXEC_OPEN_FILES,
                  processes=settings.SKALD_EXEC_PROCESSES)


def _hidden() -> tuple[str, ...]:
    """Server paths masked even if they sit below a directory the sandbox shows (e.g. under /usr)."""
    database = str(settings.DATABASES["default"].get("NAME") or "")
    paths = [settings.BASE_DIR, settings.VAR_DIR, settings.SKALD_WORKSPACE_ROOT]
    if database.startswith("/"):
        paths.append(type(settings.BASE_DIR)(database).parent)
    return tuple(dict.fromkeys(str(path) for path in paths))


def exec_confinement() -> Bubblewrap | None:
    """The bubblewrap sandbox, or None when it is off or does not work on this machine."""
    if settings.SKALD_EXEC_SANDBOX != "auto":
        return None
    return Bubblewrap.find(limits=exec_limits(), network=settings.SKALD_EXEC_NETWORK,
                           uid=settings.SKALD_EXEC_UID, hide=_hidden())


def unconfined_accepted() -> bool:
    return bool(settings.SKALD_EXEC_UNCONFINED_OK)


def exec_sandbox() -> Sandbox:
    """The sandbox ``execute_cmd`` runs in.

    Raises:
        ToolError: ``exec_unconfined_refused`` when there is no sandbox and unconfined commands
            are not accepted here.
    """
    confined = exec_confinement()
    if confined is not None:
        return confined
    if not unconfined_accepted():
        raise ToolError("commands are refused: no sandbox is available on this worker and "
                        "SKALD_EXEC_UNCONFINED_OK is not set", code="exec_unconfined_refused")
    return Unconfined(limits=exec_limits())


def sandbox_label() -> str:
    """What the inspector shows: ``bubblewrap``, or ``unavailable``."""
    confined = exec_confinement()
    return confined.name if confined is not None else "unavailable"


def sandbox_facts() -> dict[str, Any]:
    """The confinement an approver of ``execute_cmd`` should know about."""
    confined = exec_confinement()
    if confined is not None:
        return confined.describe()
    return {"sandbox": "unavailable", "refused": not unconfined_accepted()}
