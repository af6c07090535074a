"""`make run`: migrate, seed the demo, then run daphne, a django-q2 cluster and the sweeper side by side.

The maintenance child (``--maintain``) prepares the database and reports back through a pipe, then
sweeps (``manage.py skald_sweeper``) and records the audit chain head when it is stopped, last, once
the web process and the workers have stopped: one Django start-up for the three jobs.

Ctrl-C or SIGTERM stops both and leaves no process behind. Each child runs in its own session so
the whole group (qcluster's workers included) can be killed; every process also asks the kernel to
signal it when its parent dies (PR_SET_PDEATHSIG), so even a SIGKILLed `make` leaves no orphan.
A failing preparation (e.g. `check` refusing a partial provider profile) exits non-zero, starting nothing.
The qcluster (`manage.py skald_qcluster`) exits ``QUEUE_LOST_EXIT`` when a worker died idle and may
have taken the task queue's lock with it; the launcher then starts a fresh one at once. A watchdog
reads `/readyz` and replaces the qcluster when its workers are wedged anyway (`skald/workers.py`).
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skald.core.var import var_dir_path, var_dir_prepare

BASE_DIR = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 10.0
# A wedged cluster's leader waits forever for workers stuck on the queue lock to take their stop
# pill; by definition none of them runs a task, so it gets a short grace before SIGKILL.
WEDGED_STOP_GRACE_SECONDS = 2.0
WATCH_SECONDS = 2.0  # how often the launcher reads /readyz's `workers`
# skald_qcluster's status when a worker died idle, possibly holding its task queue's read lock
# (EX_TEMPFAIL): the supervisor restarts the cluster at once (docs/production.md, "Supervision").
QUEUE_LOST_EXIT = 75


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: Ctrl-C and SIGTERM handling still apply
        pass


def _start_maintenance() -> tuple[subprocess.Popen[bytes], int, str]:
    """The maintenance child: it prepares the database (`check`, `migrate`, `seed_demo`), reports, then
    sweeps until stopped and records the chain head on its way out: one Django start-up for what were
    three processes (prepare, sweeper, record-head).

    Returns the child, the preparation's status and what it printed (the logins, which the launcher
    prints last, with the URLs). A partial provider profile (skald.E001) refuses to boot here, before
    anything is migrated; the child has then exited with that status.
    """
    report_read, report_write = os.pipe()
    child = subprocess.Popen([sys.executable, "-m", "skald.launcher", "--maintain", str(report_write)],
                             cwd=BASE_DIR, start_new_session=True, preexec_fn=_die_with_parent,
                             pass_fds=(report_write,))
    os.close(report_write)
    with os.fdopen(report_read, encoding="utf-8") as report:
        raw = report.read()  # EOF once the child reported, or died
    try:
        prepared = json.loads(raw)
        return child, int(prepared["code"]), str(prepared["logins"])
    except (ValueError, KeyError, TypeError):  # it died before reporting
        return child, child.wait() or 1, ""


def _port_taken(host: str, port: int) -> OSError | None:
    """Why ``host:port`` cannot be bound now (another program listens there), or None."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne binds
            probe.bind((host, port))
    except OSError as refused:
        return refused
    return None


def _banner(base: str, logins: str) -> str:
    """What `make run` prints once its own server answers: the first steps, then logins and URLs last."""
    return (f"\nSkald is running. Press Ctrl-C to stop.\n"
            "A first governed run: sign in as operator and press **Launch a run** on the home page; "
            "then as approver, open the pending approval and approve it; then as reviewer, accept the "
            "run's proposal.\n\n"
            f"{logins.strip()}\n"
            "Notifications: the approver's e-mails (approval pending, escalated, expiring, expired) are "
            "printed here, in this window, by the console e-mail backend (set SKALD_EMAIL_HOST to send them).\n"
            f"URLs:\n  home:     {base}/admin/\n  console:  {base}/console/\n"
            f"  API docs: {base}/api/docs/\n  ready:    {base}/readyz\n")


def _prepare_in_process(out: io.StringIO) -> int:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    try:
        call_command("check", stdout=io.StringIO())  # problems go to stderr; "no issues" is not a login
    except SystemCheckError as exc:
        print(exc, file=sys.stderr)
        return 1
    call_command("migrate", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=out)
    from audit.actors import Actor
    from audit.heads import chain_head_checkpoint

    chain_head_checkpoint(actor=Actor.system("launcher"))  # and at start: the chain as found
    from django_q.tasks import async_task

    # Job endings a lost worker left undelivered go out as soon as the cluster is up (SPEC S4);
    # the every-minute schedule would get them too, a little later.
    async_task("skald.tasks.deliver_due_jobs", group="skald")
    return 0


def _maintain_in_process(report_fd: int) -> int:
    """``--maintain FD``: prepare, write ``{"code", "logins"}`` to FD and close it, then sweep until
    SIGTERM (``manage.py skald_sweeper``) and record the chain head at the end."""
    import django

    django.setup()
    logins = io.StringIO()
    code = _prepare_in_process(logins)
    with os.fdopen(report_fd, "w", encoding="utf-8") as report:
        report.write(json.dumps({"code": code, "logins": logins.getvalue()}))
    if code != 0:
        return code
    from django.core.management import call_command

    call_command("skald_sweeper")  # returns on SIGTERM or SIGINT
    return _record_chain_head_in_process()


def _record_chain_head() -> None:
    """Record and export a signed audit chain head (audit/heads.py) in a child process, when the
    maintenance child could not (it died before the stop); a failure is reported, never fatal: the
    scheduled recording catches up."""
    code = subprocess.run([sys.executable, "-m", "skald.launcher", "--record-head"], cwd=BASE_DIR).returncode
    if code != 0:
        print(f"Recording the audit chain head failed (exit code {code}).", file=sys.stderr)


def _record_chain_head_in_process() -> int:
    import django

    django.setup()  # a no-op in the maintenance child, which has set Django up already
    from audit.actors import Actor
    from audit.heads import chain_head_checkpoint

    head = chain_head_checkpoint(actor=Actor.system("launcher"))
    print(f"Audit chain head recorded: seq {head.seq}.", flush=True)
    return 0


def _serve(argv: list[str]) -> int:
    """daphne, with the HTTP layer's own refusals answered as JSON.

    Twisted reads a request line or header line of at most 16 KiB and otherwise drops the
    connection without a word; a malformed request gets a bare ``400``. Here a too-long request
    line answers ``414 {"code": "uri_too_long"}``, a too-long header line ``431``, anything else
    it refuses ``400 {"code": "bad_request"}``. Shorter oversize query strings reach Django's
    request guard (``SKALD_MAX_QUERY_BYTES``), which answers the same 414 body.
    """
    from daphne import http_protocol
    from daphne.cli import CommandLineInterface
    from twisted.web import http

    class GuardedChannel(http.HTTPChannel):
        def _refuse(self, status: bytes, code: str, message: str) -> None:
            # The {code, message, extra} body (skald.core.api.exceptions.error_body; importing it
            # here would load Django before daphne sets it up).
            body = json.dumps({"code": code, "message": message, "extra": {}}).encode()
            head = (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
            transport: Any = self.transport
            transport.write(head + body)
            self.loseConnection()

        def lineLengthExceeded(self, line: bytes) -> None:
            if getattr(self, "_HTTPChannel__first_line", 0):
                self._refuse(b"414 URI Too Long", "uri_too_long", "The request line is too long.")
            else:
                self._refuse(b"431 Request Header Fields Too Large", "headers_too_large", "A header is too long.")

        def _respondToBadRequestAndDisconnect(self) -> None:
            self._refuse(b"400 Bad Request", "bad_request", "Malformed HTTP request.")

    def guarded_protocol(factory: object) -> http._GenericHTTPChannelProtocol:
        return http._GenericHTTPChannelProtocol(GuardedChannel())

    http_protocol.HTTPFactory.protocol = guarded_protocol  # type: ignore[assignment]
    sys.argv = ["daphne", *argv]
    CommandLineInterface.entrypoint()
    return 0


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=BASE_DIR, start_new_session=True, preexec_fn=_die_with_parent)


def _stop(children: list[subprocess.Popen[bytes]], grace: float = STOP_GRACE_SECONDS) -> None:
    for child in children:
        # The leader only: qcluster's leader stops its sentinel and workers in order. A SIGTERM to
        # the whole group kills the sentinel outright (SIG_DFL) while it may hold the shared stop
        # event's lock, and the leader then hangs in stop() until the SIGKILL below.
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for child in children:
        # The group outlives a leader that exited (qcluster's workers): kill what is left.
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if child.poll() is None:
            child.wait()


def _wait_until_serving(
    url: str, daphne: subprocess.Popen[bytes], stopping: Callable[[], bool], timeout: float = 30.0
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and daphne.poll() is None and not stopping():
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - our own loopback URL
                return response.status == 200 and daphne.poll() is None  # ours, not a stranger on the port
        except OSError:
            time.sleep(0.2)
    return False


def _workers_state(url: str) -> str:
    """``workers`` of the readiness report (``/readyz`` answers 503 with the same body when not ready)."""
    try:
        with urllib.request.urlopen(url, timeout=WATCH_SECONDS) as response:  # noqa: S310 - our own loopback URL
            body = response.read()
    except urllib.error.HTTPError as refused:
        body = refused.read()
    except OSError:
        return "unknown"
    try:
        return str(json.loads(body).get("workers", "unknown"))
    except (ValueError, AttributeError):
        return "unknown"


def _spawn_clusters() -> list[subprocess.Popen[bytes]]:
    # SKALD_QCLUSTERS: how many qcluster processes (each with SKALD_Q_WORKERS workers) to run here.
    count = max(1, int(os.environ.get("SKALD_QCLUSTERS", "1") or "1"))
    return [_spawn_cluster() for _ in range(count)]


def _spawn_cluster() -> subprocess.Popen[bytes]:
    return _spawn([sys.executable, str(BASE_DIR / "manage.py"), "skald_qcluster"])


def _stall_seconds() -> float:
    # The same default as settings.SKALD_WORKERS_STALL_SECONDS (the launcher does not load Django).
    sweep = float(os.environ.get("SKALD_SWEEP_SECONDS") or 5)
    return float(os.environ.get("SKALD_WORKERS_STALL_SECONDS") or sweep + 10)


def main() -> int:
    _die_with_parent()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    # The latest signed chain head is exported here unless the operator names another sink.
    os.environ.setdefault("SKALD_CHAIN_HEAD_FILE", str(var_dir_path(BASE_DIR) / "chain_head.json"))
    # The demo's MCP server runs on this interpreter (docs/mcp.md); an operator's list is kept as is.
    os.environ.setdefault("SKALD_MCP_STDIO_ALLOWLIST", sys.executable)
    host = os.environ.get("HOST", "127.0.0.1")
    port = os.environ.get("PORT", "8000")
    if not port.isdigit() or not 0 < int(port) < 65536:
        print(f"PORT={port!r} is not a port number; choose one, e.g. `make run PORT=8001`.", file=sys.stderr)
        return 2
    # Deep links in notifications point at this server unless the operator names its public address.
    os.environ.setdefault("SKALD_PUBLIC_URL", f"http://{host}:{port}")
    busy = _port_taken(host, int(port))
    if busy is not None:
        print(f"Cannot listen on {host}:{port}: {busy.strerror or busy}. Another program (perhaps another "
              f"`make run`) holds it; stop it, or choose another port: `make run PORT=8001` "
              "(and HOST=... for another address).", file=sys.stderr)
        return 2
    var_dir_prepare(var_dir_path(BASE_DIR))  # before any child reads settings: one secret key for all
    stopping = crashed = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    maintenance, prepared, logins = _start_maintenance()
    if prepared != 0:
        print(logins, end="")
        print(f"Preparing the database failed (exit code {prepared}); not starting.", file=sys.stderr)
        _stop([maintenance])
        return prepared

    children: list[subprocess.Popen[bytes]] = [maintenance]

    try:
        daphne = _spawn([sys.executable, "-m", "skald.launcher", "--serve", "-b", host, "-p", port,
                         "skald.asgi:application"])
        children.append(daphne)
        clusters = _spawn_clusters()
        children += clusters
        display_host = f"[{host}]" if ":" in host else host
        base = f"http://{display_host}:{port}"
        if _wait_until_serving(f"{base}/healthz", daphne, lambda: stopping):
            print(_banner(base, logins), flush=True)
        elif not stopping:
            print(f"Skald's server did not start on {base} (see its output above); stopping.", file=sys.stderr)
            stopping = crashed = True
        # The watchdog: a cluster whose workers wedged (readiness says so) is replaced, at most once
        # per stall bound, so the new one has that long to start a task (skald/workers.py).
        watch_after = time.monotonic() + _stall_seconds()
        while not stopping:
            for child in list(children):
                if child.poll() is None:
                    continue
                if child in clusters and child.returncode == QUEUE_LOST_EXIT and not stopping:
                    # A worker died idle (skald_qcluster): its queue may be locked; a fresh cluster now.
                    print("A qcluster worker died idle; the qcluster exited to drop its task queue; "
                          "restarting the qcluster.", file=sys.stderr, flush=True)
                    _stop([child], grace=0.0)  # what is left of its group (a worker's own children)
                    fresh = _spawn_cluster()
                    clusters[clusters.index(child)] = fresh
                    children[children.index(child)] = fresh
                    watch_after = time.monotonic() + _stall_seconds()
                    continue
                print(f"A child process exited with code {child.returncode}; stopping.", file=sys.stderr)
                stopping = crashed = True
            if not stopping and time.monotonic() >= watch_after:
                watch_after = time.monotonic() + WATCH_SECONDS
                if _workers_state(f"{base}/readyz") == "wedged":
                    print("Workers are wedged: due work waits and no worker started a task; restarting "
                          "the qcluster.", file=sys.stderr, flush=True)
                    _stop(clusters, grace=WEDGED_STOP_GRACE_SECONDS)
                    children = [child for child in children if child not in clusters]
                    clusters = _spawn_clusters()
                    children += clusters
                    watch_after = time.monotonic() + _stall_seconds()
            time.sleep(0.2)
    finally:
        # The web process and the workers first, then the maintenance child, which records a head
        # at shutdown (a tail cut while Skald is down is then visible) once nothing else writes.
        alive = maintenance.poll() is None
        _stop([child for child in children if child is not maintenance])
        _stop([maintenance])
        # Another child records the head only when the maintenance child never tried: it had died
        # before the stop, or was killed in it. One that tried and failed (the database is gone)
        # said why; a second try would only wait for the same database again.
        if not alive or maintenance.returncode < 0:
            _record_chain_head()
    print("Skald stopped.", flush=True)
    return 1 if crashed else 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    if sys.argv[1:2] == ["--maintain"]:
        sys.exit(_maintain_in_process(int(sys.argv[2])))
    if sys.argv[1:] == ["--record-head"]:
        sys.exit(_record_chain_head_in_process())
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(_serve(sys.argv[2:]))
    sys.exit(main())
