"""One benchmark child process that writes its figures as JSON to a file."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def run_for_json(argv: list[str], env: dict[str, str], result_file: Path, timeout: float) -> dict[str, object] | str:
    """Run ``argv`` (its output streams through) and return the figures it wrote to
    ``result_file``; or why there are none."""
    try:
        completed = subprocess.run(argv, cwd=BASE_DIR, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:g} s"
    if completed.returncode != 0 or not result_file.exists():
        return f"failed with exit status {completed.returncode}"
    return dict(json.loads(result_file.read_text(encoding="utf-8")))
