"""CPU seconds of running processes, read from /proc (Linux): what a process of the stack has spent."""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds of ``pids`` so far; a process that has ended counts nothing."""
    total = 0
    for pid in pids:
        if (fields := _fields(pid)) is not None:
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / TICKS


def cpu_seconds_with_reaped(pids: list[int]) -> float:
    """As :func:`cpu_seconds`, plus what each process's children that ended and were reaped spent
    (``cutime + cstime``): over a whole process tree this counts every process that ran in it, also
    a backend or a worker that exited between two readings, and none twice."""
    total = 0
    for pid in pids:
        if (fields := _fields(pid)) is not None:
            total += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return total / TICKS


def pids_named(name: str) -> list[int]:
    """Every running process whose command name (``/proc/PID/comm``) is ``name``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    found.append(int(entry))
            except OSError:
                continue
    return found
