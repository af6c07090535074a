"""``make bench``'s side of :mod:`bench.peer`: the peer's own virtualenv, made from pyproject's
``peer`` extra on first use (and again when the extra changes), and one run of the peer per
database, in a fresh process of that virtualenv."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from bench.child_run import run_for_json
from bench.turn_shape import PeerResult
from skald.core.child_env import hermetic_env

BASE_DIR = Path(__file__).resolve().parent.parent
VENV = BASE_DIR / "var" / "bench" / "peer-venv"
PEER_POSTGRES_URL = os.environ.get("BENCH_PEER_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/skald_bench_peer")
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 300


def requirements() -> list[str]:
    """The ``peer`` extra of pyproject.toml: the peer's direct dependencies, with their ranges."""
    project = tomllib.loads((BASE_DIR / "pyproject.toml").read_text(encoding="utf-8"))
    return list(project["project"]["optional-dependencies"]["peer"])


def peer_python() -> Path | str:
    """The peer virtualenv's interpreter, installed from :func:`requirements`; or why not."""
    wanted = requirements()
    stamp = VENV / ".installed"
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()
    python = VENV / "bin" / "python"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == digest and python.exists():
        return python
    print(f"(installing the peer into {VENV}: {', '.join(wanted)})", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, timeout=INSTALL_TIMEOUT_S)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *wanted],
                       check=True, timeout=INSTALL_TIMEOUT_S, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or "").strip().splitlines()
        return f"could not install the peer: {last[-1] if last else exc}"
    except subprocess.TimeoutExpired as exc:
        return f"could not install the peer ({exc})"
    stamp.write_text(digest, encoding="utf-8")
    return python


PEERS = {"bench.peer": "LangGraph", "bench.peer_dbos": "a DBOS Transact workflow"}


def run_peer(title: str, database: str, result_file: Path, module: str = "bench.peer") -> PeerResult | str:
    """One peer process (:mod:`bench.peer`, or :mod:`bench.peer_dbos`) on ``database``: ``sqlite``, or
    the URL of an empty PostgreSQL database (the caller recreates it, as for the kernel runs)."""
    print(f"\n=== Peer: the same turn through {PEERS[module]}, {title} ({module.replace('.', '/')}.py) ===",
          flush=True)
    python = peer_python()
    if isinstance(python, str):
        return python
    figures = run_for_json([str(python), "-m", module, "--database", database, "--result-file",
                            str(result_file)], hermetic_env(PYTHONWARNINGS="ignore::DeprecationWarning"),
                           result_file, RUN_TIMEOUT_S)
    return figures if isinstance(figures, str) else PeerResult(**figures)  # type: ignore[arg-type]
