"""CPU seconds of running processes, read from /proc (Linux): what a process of the stack has spent."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds of ``pids`` so far; a process that has ended counts nothing."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / ticks
