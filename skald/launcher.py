"""`make run`: migrate, seed the demo, then run daphne and a django-q2 cluster side by side.

Ctrl-C or SIGTERM stops both and leaves no process behind. Each child runs in its own session so
the whole group (qcluster's workers included) can be killed; every process also asks the kernel to
signal it when its parent dies (PR_SET_PDEATHSIG), so even a SIGKILLed `make` leaves no orphan.
A failing preparation (e.g. `check` refusing a partial provider profile) exits non-zero, starting nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from skald.core.var import var_dir_path, var_dir_prepare

BASE_DIR = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 10.0


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:  # not Linux: Ctrl-C and SIGTERM handling still apply
        pass


def _prepare() -> int:
    """`check`, `migrate` and `seed_demo` in one child process (one Django start-up, not three).

    A partial provider profile (skald.E001) refuses to boot here, before anything is migrated.
    """
    return subprocess.run([sys.executable, "-m", "skald.launcher", "--prepare"], cwd=BASE_DIR).returncode


def _prepare_in_process() -> int:
    import django
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    django.setup()
    try:
        call_command("check")
    except SystemCheckError as exc:
        print(exc, file=sys.stderr)
        return 1
    call_command("migrate", interactive=False, verbosity=0)
    call_command("seed_demo")
    from django_q.tasks import async_task

    # Job endings a lost worker left undelivered go out as soon as the cluster is up (SPEC S4);
    # the every-minute schedule would get them too, a little later.
    async_task("skald.tasks.deliver_due_jobs", group="skald")
    return 0


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=BASE_DIR, start_new_session=True, preexec_fn=_die_with_parent)


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        # The leader only: qcluster's leader stops its sentinel and workers in order. A SIGTERM to
        # the whole group kills the sentinel outright (SIG_DFL) while it may hold the shared stop
        # event's lock, and the leader then hangs in stop() until the SIGKILL below.
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
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
                return response.status == 200
        except OSError:
            time.sleep(0.2)
    return False


def main() -> int:
    _die_with_parent()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
    host = os.environ.get("HOST", "127.0.0.1")
    port = os.environ.get("PORT", "8000")
    var_dir_prepare(var_dir_path(BASE_DIR))  # before any child reads settings: one secret key for all
    prepared = _prepare()
    if prepared != 0:
        print(f"Preparing the database failed (exit code {prepared}); not starting.", file=sys.stderr)
        return prepared

    children: list[subprocess.Popen[bytes]] = []
    stopping = crashed = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        daphne = _spawn([sys.executable, "-m", "daphne", "-b", host, "-p", port, "skald.asgi:application"])
        children.append(daphne)
        children.append(_spawn([sys.executable, str(BASE_DIR / "manage.py"), "qcluster"]))
        children.append(_spawn([sys.executable, str(BASE_DIR / "manage.py"), "skald_sweeper"]))
        display_host = f"[{host}]" if ":" in host else host
        base = f"http://{display_host}:{port}"
        if _wait_until_serving(f"{base}/healthz", daphne, lambda: stopping):
            print(f"\nSkald is running.\n  admin:    {base}/admin/\n  API docs: {base}/api/docs/\n"
                  f"  console:  {base}/console/\n  ready:    {base}/readyz\n"
                  "A first governed run: log in to the admin as operator, Cases → tick the demo case → "
                  "action \"Launch GDL run\"; then as approver, Pending approvals → approve the diff; then as "
                  "reviewer, Proposals → accept.\nPress Ctrl-C to stop.\n", flush=True)
        while not stopping:
            for child in children:
                if child.poll() is not None:
                    print(f"A child process exited with code {child.returncode}; stopping.", file=sys.stderr)
                    stopping = crashed = True
            time.sleep(0.2)
    finally:
        _stop(children)
    print("Skald stopped.", flush=True)
    return 1 if crashed else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--prepare"]:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
        sys.exit(_prepare_in_process())
    sys.exit(main())
