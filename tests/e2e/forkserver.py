"""A fork server for short-lived Python children: one process imports the heavy libraries once, then
forks a child per request that runs ``python -m MODULE ARGS`` with its own environment.

The crash campaign starts about 64 worker processes per database; each used to spend most of its
CPU importing Django, pydantic, psycopg and the rest before it did anything. Only libraries that read
no configuration at import are preloaded: the child sets its environment, then imports Skald and
calls ``django.setup()`` itself, exactly as a fresh interpreter would. A child dies as a process
does (SIGKILL at a failpoint reads as ``returncode == -9``); its stdout and stderr are captured.

Run as ``python -m tests.e2e.forkserver``: requests and answers are JSON lines on stdin/stdout.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# Libraries whose import reads no environment and touches no settings (Django's settings are lazy).
# Not prometheus_client: it picks its value class from PROMETHEUS_MULTIPROC_DIR at import.
PRELOAD = ("django", "django.db.models", "django.db.backends.sqlite3.base", "django.db.backends.postgresql.base",
           "django.core.management", "django.test", "django.contrib.auth.hashers", "django.template",
           "psycopg", "pydantic", "jinja2", "httpx", "jsonschema", "asyncio", "ssl", "email.message",
           "http.client", "zipfile", "decimal", "concurrent.futures", "channels.layers", "pydantic.main",
           "pydantic.fields", "pydantic.type_adapter", "psycopg_pool", "dateutil.parser", "dateutil.tz", "tiktoken",
           "croniter", "multiprocessing", "tomllib", "annotated_types", "dj_database_url", "django.urls",
           "django.forms", "django.core.handlers.asgi", "django.core.serializers.json", "django.views.generic")
BASE_DIR = Path(__file__).resolve().parents[2]


def _serve() -> int:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # a library that needs configuration is imported by the child
            continue
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    answers.write(b'{"ready": true}\n')
    answers.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(request)
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        answers.flush()
    return 0


def _child(request: Mapping[str, Any]) -> None:
    import runpy

    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        sys.stdin = open(0, closefd=False)  # the process's own streams
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.argv = [request["module"], *request["args"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # print it as an interpreter would, then exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class ForkServer:
    """The client: :meth:`run` is ``subprocess.run([python, "-m", module, *args], env=env,
    capture_output=True, text=True)`` through the server. One child at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process = subprocess.Popen([sys.executable, "-m", "tests.e2e.forkserver"], cwd=BASE_DIR,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._read(60.0) == {"ready": True}, "the fork server did not start"
        self._dir = tempfile.TemporaryDirectory(prefix="skald-forkserver-")

    def _read(self, timeout: float) -> dict[str, Any]:
        stdout: IO[bytes] = self._process.stdout  # type: ignore[assignment]
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            self._process.kill()
            raise AssertionError(f"the fork server's child ran longer than {timeout} s")
        line = stdout.readline()
        assert line, f"the fork server exited {self._process.wait()}"
        return dict(json.loads(line))

    def run(self, module: str, args: Sequence[str], *, env: Mapping[str, str], cwd: Path = BASE_DIR,
            timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        with self._lock:
            out, err = Path(self._dir.name, "stdout"), Path(self._dir.name, "stderr")
            request = {"module": module, "args": list(args), "env": dict(env), "cwd": str(cwd), "stdout": str(out),
                       "stderr": str(err)}
            stdin: IO[bytes] = self._process.stdin  # type: ignore[assignment]
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
            code = int(self._read(timeout)["returncode"])
            return subprocess.CompletedProcess([module, *args], code, out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()  # type: ignore[union-attr]
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._dir.cleanup()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(_serve())
