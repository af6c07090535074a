"""The real stack as a test sees it: ``python -m skald.launcher`` (daphne + a django-q2 qcluster,
SQLite under its own ``SKALD_VAR_DIR``, the ORM broker) on a free loopback port, plus a small REST
client. Nothing is mocked; processes are found through ``/proc``."""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from skald.core.child_env import hermetic_env

BASE_DIR = Path(__file__).resolve().parents[2]
PASSWORD = "e2e-demo-password-7c41"
BOOT_TIMEOUT = 180.0  # a hang guard: a boot beside every other phase on two loaded cores took over 60 s in CI
STOP_TIMEOUT = 20.0  # the launcher's own grace is 10 s; a clean stop takes about 2 s
# Inherited settings that would point the stack somewhere else than its temporary SQLite.

T = TypeVar("T")


# --- /proc --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    state: str
    started: int  # clock ticks after boot: (pid, started) names a process even if the pid is reused
    cmdline: str


def _read_proc(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw_cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # comm may hold spaces and parentheses
    return Proc(pid=pid, ppid=int(fields[1]), sid=int(fields[3]), state=fields[0], started=int(fields[19]),
                cmdline=raw_cmd.replace(b"\0", b" ").decode(errors="replace").strip())


def processes() -> list[Proc]:
    found = (_read_proc(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return [proc for proc in found if proc is not None and proc.state != "Z"]  # a zombie runs nothing


def descendants(root: int) -> list[Proc]:
    table = processes()
    tree, frontier = [], {root}
    while frontier:
        layer = [proc for proc in table if proc.ppid in frontier]
        tree += layer
        frontier = {proc.pid for proc in layer}
    return tree


def _sockets_connected_to(port: int) -> set[str]:
    """The inodes of this machine's established TCP sockets whose remote end is loopback ``port``."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()  # sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if fields[3] == "01" and int(fields[2].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def connected_to(root: int, port: int) -> list[Proc]:
    """The processes under ``root`` holding an established connection to loopback ``port`` (a
    worker in the middle of a provider call to a fake server listening there)."""
    sockets = {f"socket:[{inode}]" for inode in _sockets_connected_to(port)}
    return [proc for proc in descendants(root) if _open_files(proc.pid) & sockets]


def _open_files(pid: int) -> set[str]:
    """What ``pid``'s descriptors point at (``socket:[inode]`` for a socket); one that closes
    while it is read is skipped."""
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return set()
    links = set()
    for descriptor in descriptors:
        try:
            links.add(os.readlink(descriptor))
        except OSError:
            continue
    return links


# --- helpers ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(probe: Callable[[], T | None], *, timeout: float, interval: float = 0.05, what: str = "") -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or probe}")
        time.sleep(interval)


# --- the stack ----------------------------------------------------------------------------------------


@dataclass
class Stack:
    """One running ``python -m skald.launcher``."""

    process: subprocess.Popen[bytes]
    port: int
    var_dir: Path
    log_path: Path
    stopped: bool = False
    seen: dict[tuple[int, int], str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=10.0)

    def token(self, username: str, password: str = PASSWORD) -> str:
        if username not in self.tokens:  # each login costs a password hash
            with self.http() as client:
                response = client.post("/api/auth/token/", json={"username": username, "password": password})
            assert response.status_code == 200, response.text
            self.tokens[username] = str(response.json()["access"])
        return self.tokens[username]

    def api(self, username: str) -> Api:
        return Api(self.http(self.token(username)))

    def workspace_put(self, session_id: int, path: str, text: str) -> None:
        """Seed a session's workspace the way an operator does (`manage.py workspace_put`)."""
        env = hermetic_env(SKALD_VAR_DIR=str(self.var_dir))
        done = subprocess.run([sys.executable, str(BASE_DIR / "manage.py"), "workspace_put", str(session_id), path],
                              input=text.encode(), cwd=BASE_DIR, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode(errors="replace")

    def remember_tree(self) -> list[Proc]:
        """Record the launcher's process tree now (qcluster forks its workers after /healthz)."""
        tree = descendants(self.process.pid)
        self.seen.update({(proc.pid, proc.started): proc.cmdline for proc in tree})
        return tree

    def sessions(self) -> set[int]:
        """The launcher's session and its children's: daphne and qcluster each lead their own."""
        return {self.process.pid} | {proc.pid for proc in descendants(self.process.pid)
                                     if proc.ppid == self.process.pid}

    def leftovers(self, sessions: set[int]) -> list[Proc]:
        return [proc for proc in processes()
                if proc.sid in sessions or (proc.pid, proc.started) in self.seen]

    def stop(self) -> None:
        """SIGTERM the launcher; assert it exits 0 and leaves no process behind."""
        assert not self.stopped, "the stack is already stopped"
        self.remember_tree()
        sessions = self.sessions()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the launcher ignored SIGTERM for {STOP_TIMEOUT} s:\n{self.log()[-3000:]}") from None
        finally:
            self.stopped = True
        assert code == 0, f"the launcher exited {code}:\n{self.log()[-3000:]}"
        # Everything below the launcher was waited for before it exited: nothing may be left at all.
        left = self.leftovers(sessions)
        assert not left, "left behind: " + "; ".join(f"{p.pid} {p.cmdline}" for p in left)


Launch = Callable[..., "Stack"]  # the ``launch_stack`` fixture's type


@functools.cache
def migrated_sqlite() -> Path:
    """A SQLite file with every migration applied: the run's template (``SKALD_TEST_SQLITE_TEMPLATE``,
    ``skald/testrun.py``), else one made once per process (``manage.py migrate`` into a throw-away
    var dir) and removed at exit. Callers copy it; nobody writes it."""
    shared = os.environ.get("SKALD_TEST_SQLITE_TEMPLATE", "")
    if shared and Path(shared).is_file():
        return Path(shared)
    home = Path(tempfile.mkdtemp(prefix="skald-migrated-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    done = subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=BASE_DIR,
                          env=hermetic_env(SKALD_VAR_DIR=str(home)), capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"migrating the stacks' template failed:\n{done.stderr[-3000:]}"
    # The process closed its connections, so the WAL was checkpointed into the file: one file to copy.
    assert not (home / "skald.sqlite3-wal").exists(), "the migrated template left a WAL behind"
    return home / "skald.sqlite3"


def template_clause() -> str:
    """`` TEMPLATE "<the run's migrated database>"`` for a stack's own PostgreSQL database when the test
    run made one (``SKALD_TEST_PG_TEMPLATE``, skald/testrun.py): its launcher then finds nothing to
    migrate, as a SQLite stack starting from :func:`migrated_sqlite`."""
    template = os.environ.get("SKALD_TEST_PG_TEMPLATE", "")
    return f' TEMPLATE "{template}"' if template else ""


def launch(var_dir: Path, extra_env: Mapping[str, str] | None = None, *, wait: bool = True,
           fresh: bool = False) -> Stack:
    """Start ``python -m skald.launcher`` on a free port; with ``wait``, return once /healthz answers.

    A stack on a new SQLite var dir starts from a copy of :func:`migrated_sqlite` (its launcher
    then finds nothing to migrate and seeds as on any start), which spares each boot about two
    seconds of migrations; ``fresh`` starts from an empty var dir as ``make run`` does the first time.
    """
    var_dir.mkdir(parents=True, exist_ok=True)
    database = var_dir / "skald.sqlite3"
    own_database = any(name in (extra_env or {}) for name in ("DATABASE_URL", "SKALD_SQLITE_PATH"))
    if not (fresh or own_database or database.exists()):
        shutil.copyfile(migrated_sqlite(), database)
    port = free_port()
    # No stdio MCP program unless a test asks (extra_env): the demo's MCP server (make run) is then
    # not started at seeding, which would add a Python process's start to every stack's boot.
    env = hermetic_env(HOST="127.0.0.1", PORT=str(port), SKALD_VAR_DIR=str(var_dir), SKALD_DEMO_PASSWORD=PASSWORD,
                       PYTHONUNBUFFERED="1", SKALD_MCP_STDIO_ALLOWLIST="")
    env.update(extra_env or {})
    log_path = var_dir.parent / f"{var_dir.name}-launcher-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "skald.launcher"], cwd=BASE_DIR, env=env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    stack = Stack(process=process, port=port, var_dir=var_dir, log_path=log_path)
    if wait:
        try:
            wait_for(lambda: _healthy(stack), timeout=BOOT_TIMEOUT, interval=0.1, what="/healthz")
        except AssertionError:
            if process.poll() is None:
                stack.stop()
            raise AssertionError(f"the stack did not come up:\n{stack.log()[-3000:]}") from None
        stack.remember_tree()
    return stack


def _healthy(stack: Stack) -> bool:
    if stack.process.poll() is not None:
        raise AssertionError(f"the launcher exited {stack.process.returncode}:\n{stack.log()[-3000:]}")
    try:
        return httpx.get(f"{stack.base_url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_ready(stack: Stack, *, timeout: float = 30.0) -> dict[str, Any]:
    """Poll /readyz until it answers 200 (the qcluster has published its stats)."""

    def probe() -> dict[str, Any] | None:
        response = httpx.get(f"{stack.base_url}/readyz", timeout=2.0)
        return response.json() if response.status_code == 200 else None

    return wait_for(probe, timeout=timeout, interval=0.2, what="/readyz 200")


# --- a REST client ------------------------------------------------------------------------------------

TERMINAL = {"settled", "broken"}


class Api:
    """The session API as one authenticated user sees it."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def create_session(self, agent: str = "troubleshooter") -> dict[str, Any]:
        response = self.client.post("/api/sessions/", json={"agent": agent})
        assert response.status_code == 201, response.text
        return dict(response.json())

    def post_message(self, session_id: int, content: str, key: str | None = None) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key else {}
        return self.client.post(f"/api/sessions/{session_id}/messages/", json={"content": content}, headers=headers)

    def send(self, session_id: int, content: str, key: str | None = None) -> dict[str, Any]:
        response = self.post_message(session_id, content, key)
        assert response.status_code == 202, response.text
        return dict(response.json())

    def exchange(self, session_id: int, exchange_id: int) -> dict[str, Any]:
        response = self.client.get(f"/api/sessions/{session_id}/exchanges/{exchange_id}/")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def wait_settled(self, session_id: int, exchange_id: int, *, timeout: float = 20.0) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            row = self.exchange(session_id, exchange_id)
            return row if row["status"] in TERMINAL else None

        return wait_for(probe, timeout=timeout, what=f"exchange {exchange_id} to settle")

    def events(self, session_id: int, after: int = 0) -> list[dict[str, Any]]:
        """Every stored event after ``after``, through all pages."""
        found: list[dict[str, Any]] = []
        while True:
            response = self.client.get(f"/api/sessions/{session_id}/events/", params={"after": after, "limit": 500})
            assert response.status_code == 200, response.text
            page = response.json()
            found += page["results"]
            after = page["last_seq"]
            if not page["more"]:
                return found


def paginator_count(html: str) -> int:
    """The total an admin changelist prints under its rows (``5 users``, ``1 case``)."""
    match = re.search(r'<p class="paginator">\s*(\d+) ', html)
    assert match, "no paginator on the page"
    return int(match.group(1))
