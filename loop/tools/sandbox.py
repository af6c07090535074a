"""Confinement for programs the loop starts (``execute_cmd`` now, stdio MCP servers later).

A :class:`Sandbox` turns an argv and a host workspace directory into a :class:`Launch`: the argv,
user and descriptors to hand to :class:`subprocess.Popen`. Two implementations:

- :class:`Bubblewrap` (Debian's ``bubblewrap``): the program sees its own workspace read-write at
  ``/workspace``, ``/usr`` (and the ``/bin``, ``/lib*`` links) and a few files of ``/etc``
  read-only, a fresh ``/tmp``, a ``/proc`` of its own pid namespace and a minimal ``/dev`` —
  nothing else of the host: no ``var/``, no database, no key, no other session, no host
  ``/proc``. No network unless allowed. Resource limits are set inside the sandbox by
  util-linux's ``prlimit`` (CPU seconds, address space, file size, open files, processes). Run
  as root, the server hands the workspace to an unprivileged uid (default 65534, ``nobody``) and
  the program runs as that uid (``setpriv``, every capability dropped, no new privileges), so the
  kernel enforces the process limit (uid 0 is exempt from it); a user namespace of its own
  (``unshare``) makes that count per sandbox rather than per uid, where the host allows one.
  Run as anyone else, bubblewrap's user namespace maps the server's uid to that uid inside, the
  count is per sandbox, and the program cannot create further user namespaces.
- :class:`Unconfined`: today's plain child (optionally with the same limits, minus the process
  count, which would count the server's own processes). Only for machines without bubblewrap.

Threat limits: the kernel is shared (no seccomp filter beyond bubblewrap's defaults), ``/usr`` is
readable, and where a root server's host forbids unprivileged user namespaces the process count is
shared by every sandbox running as that uid at once (``private_count`` is then False).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "DEFAULT_LIMITS",
    "SANDBOX_HOME",
    "Bubblewrap",
    "Launch",
    "Limits",
    "Sandbox",
    "Unconfined",
]

SANDBOX_HOME = "/workspace"
NOBODY = 65534
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_MIB = 1024 * 1024
# Read-only: what dynamically linked programs and their name lookups need, no more.
_ETC_FILES = (
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/ld.so.cache", "/etc/ld.so.conf",
    "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime", "/etc/mime.types",
)
_ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/etc/ssl",
                "/etc/ca-certificates")
_ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-command resource limits (``setrlimit``; 0 leaves one unset).

    Attributes:
        cpu_seconds: CPU time of each process (SIGXCPU, then SIGKILL).
        memory_bytes: Address space of each process (allocations fail beyond it).
        file_bytes: Largest file a process may write (SIGXFSZ).
        open_files: Open descriptors per process.
        processes: Processes and threads of the sandbox's user at once (fork fails beyond it).
    """

    cpu_seconds: int = 60
    memory_bytes: int = 1024 * _MIB
    file_bytes: int = 64 * _MIB
    open_files: int = 256
    processes: int = 64

    def prlimit_args(self, *, processes: bool = True) -> list[str]:
        pairs = [("cpu", self.cpu_seconds), ("as", self.memory_bytes), ("fsize", self.file_bytes),
                 ("nofile", self.open_files)]
        if processes:
            pairs.append(("nproc", self.processes))
        return [f"--{name}={value}:{value}" for name, value in pairs if value > 0]

    def describe(self) -> dict[str, int]:
        return {"cpu_seconds": self.cpu_seconds, "memory_mb": self.memory_bytes // _MIB,
                "file_mb": self.file_bytes // _MIB, "open_files": self.open_files, "processes": self.processes}


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Launch:
    """What to pass to :class:`subprocess.Popen` (``args``, ``executable``, ``cwd``, ``env`` and
    the keyword arguments in :meth:`popen_kwargs`)."""

    args: list[str]
    executable: str
    cwd: str
    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()
    user: int | None = None
    group: int | None = None
    extra_groups: list[int] | None = None

    def popen_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"args": self.args, "executable": self.executable, "cwd": self.cwd,
                                  "env": self.env, "pass_fds": self.pass_fds}
        if self.user is not None:
            kwargs.update(user=self.user, group=self.group, extra_groups=self.extra_groups or [])
        return kwargs


class Sandbox(Protocol):
    """Turns a resolved program and argv into a confined :class:`Launch`."""

    @property
    def name(self) -> str:
        """``bubblewrap``, or ``none`` for an unconfined child."""
        ...

    @property
    def confined(self) -> bool: ...

    def launch(self, executable: str, argv: Sequence[str], *, workspace: str, env: Mapping[str, str]) -> Launch:
        """The Popen settings that run ``argv`` (``executable`` resolved) in ``workspace``."""
        ...

    def describe(self) -> dict[str, Any]:
        """The confinement facts, as scalars, for inspectors and approvers."""
        ...


@dataclass(frozen=True, slots=True)
class Unconfined:
    """A plain child in ``workspace`` (its HOME): sees what the server's user sees."""

    limits: Limits | None = None
    name: str = "none"
    confined: bool = False

    def launch(self, executable: str, argv: Sequence[str], *, workspace: str, env: Mapping[str, str]) -> Launch:
        items = list(argv)
        prlimit = shutil.which("prlimit", path=_SYSTEM_PATH) if self.limits else None
        if self.limits and prlimit:
            # No process count: unconfined, it would count every process of the server's user.
            items = [prlimit, *self.limits.prlimit_args(processes=False), "--", executable, *items[1:]]
            executable = prlimit
        return Launch(args=items, executable=executable, cwd=workspace, env={**env, "HOME": workspace})

    def describe(self) -> dict[str, Any]:
        return {"sandbox": "none", **({"limits": self.limits.describe()} if self.limits else {})}


@dataclass(frozen=True, slots=True)
class Bubblewrap:
    """Runs programs under bubblewrap (see the module docstring for what they can see).

    Args:
        bwrap: The ``bwrap`` executable.
        limits: Resource limits, set inside the sandbox.
        network: Share the host's network (and its resolver files); off by default.
        uid: The unprivileged uid (and gid) programs run as; a real host uid when the server runs
            as root, otherwise the uid the server's own uid is mapped to inside.
        hide: Host paths that must never show, even below a read-only directory (``var/``, the
            database, the workspace root): an empty tmpfs is mounted over each.
        private_count: As root, give the program a user namespace of its own so its process
            limit counts its own processes only (:meth:`find` turns it off where the host forbids).
        read_only: Host paths shown read-only at the same place (a long-lived program's interpreter,
            its virtualenv, its script); a path reached through a symbolic link shows at both.
    """

    bwrap: str
    limits: Limits = DEFAULT_LIMITS
    network: bool = False
    uid: int = NOBODY
    hide: tuple[str, ...] = ()
    private_count: bool = True
    setpriv: str = "/usr/bin/setpriv"
    prlimit: str = "/usr/bin/prlimit"
    unshare: str = "/usr/bin/unshare"
    read_only: tuple[str, ...] = ()
    name: str = field(default="bubblewrap", init=False)
    confined: bool = field(default=True, init=False)

    @classmethod
    def find(cls, *, limits: Limits = DEFAULT_LIMITS, network: bool = False, uid: int = NOBODY,
             hide: Sequence[str] = ()) -> Bubblewrap | None:
        """The sandbox, if ``bwrap``, ``prlimit`` and ``setpriv`` are installed and a trial run
        works here (namespaces may be forbidden in a container); None otherwise."""
        tools = [shutil.which(name, path=_SYSTEM_PATH) for name in ("bwrap", "setpriv", "prlimit", "unshare")]
        if not all(tools):
            return None
        bwrap, setpriv, prlimit, unshare = (str(tool) for tool in tools)
        for private_count in (True, False):
            sandbox = cls(bwrap=bwrap, limits=limits, network=network, uid=uid, hide=tuple(hide),
                          private_count=private_count, setpriv=setpriv, prlimit=prlimit, unshare=unshare)
            if _works(sandbox):
                return sandbox
        return None

    def describe(self) -> dict[str, Any]:
        return {"sandbox": self.name, "network": self.network, "sees": f"{SANDBOX_HOME} only (rw), /usr (ro)",
                "limits": self.limits.describe(), "private_count": self.private_count or os.geteuid() != 0}

    def launch(self, executable: str, argv: Sequence[str], *, workspace: str, env: Mapping[str, str]) -> Launch:
        as_root = os.geteuid() == 0
        if as_root:
            _hand_over(workspace, self.uid)
        args = [self.bwrap, *self._namespaces(as_root), *self._filesystem(executable),
                "--bind", workspace, SANDBOX_HOME, "--chdir", SANDBOX_HOME]
        if as_root:
            # A real unprivileged uid outside too: the kernel then counts its processes (uid 0 is exempt).
            args += ["--", self.setpriv, f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
            if self.private_count:
                args += ["--", self.unshare, f"--map-user={self.uid}", f"--map-group={self.uid}"]
        else:
            args += ["--"]
        args += [self.prlimit, *self.limits.prlimit_args(), "--", executable, *list(argv)[1:]]
        return Launch(args=args, executable=self.bwrap, cwd="/", env={**env, "HOME": SANDBOX_HOME})

    def _namespaces(self, as_root: bool) -> list[str]:
        if as_root:  # bubblewrap needs no user namespace; setpriv needs these two to drop to the uid
            spaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
                      "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            if not self.network:
                spaces.append("--unshare-net")
        else:
            spaces = ["--unshare-all", "--unshare-user", "--disable-userns",
                      "--uid", str(self.uid), "--gid", str(self.uid)]
            if self.network:
                spaces.append("--share-net")
        return [*spaces, "--die-with-parent", "--new-session", "--hostname", "sandbox"]

    def _filesystem(self, executable: str) -> list[str]:
        args = ["--ro-bind", "/usr", "/usr"]
        for path in _ROOT_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        args += ["--perms", "0755", "--dir", "/etc"]  # else bubblewrap makes it 0700, closed to the uid
        for path in _ETC_FILES + (_ETC_NETWORK if self.network else ()):
            args += ["--ro-bind-try", path, path]
        visible = ["/usr", *_ROOT_DIRS]
        binds: list[tuple[str, str]] = []
        if not any(_under(executable, root) for root in visible):
            binds.append((executable, executable))  # an allowlisted program outside /usr
        for path in self.read_only:
            real = os.path.realpath(path)
            binds += [(real, real)] + ([(real, os.path.abspath(path))] if os.path.abspath(path) != real else [])
        # The directories leading to them, open to the uid (bubblewrap would make them 0700).
        ancestors = sorted({str(parent) for _, dest in binds for parent in Path(dest).parents if str(parent) != "/"
                            and not any(_under(str(parent), root) for root in visible)}, key=len)
        for directory in ancestors:
            args += ["--perms", "0755", "--dir", directory]
        for source, dest in binds:
            args += ["--ro-bind", source, dest]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--size", str(self._tmp_bytes()), "--tmpfs", "/tmp"]  # noqa: S108 (the sandbox's own)
        for path in self.hide:
            if any(_under(path, root) for root in visible) and os.path.isdir(path):
                args += ["--tmpfs", path]
        return args


    def _tmp_bytes(self) -> int:
        return self.limits.file_bytes or 64 * _MIB  # /tmp lives in memory: bound it


def _under(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip("/") + "/")


def _hand_over(workspace: str, uid: int) -> None:
    """Give the workspace to the sandbox's uid; links are changed, never followed."""
    os.lchown(workspace, uid, uid)
    for directory, dirs, files in os.walk(workspace, followlinks=False):
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), uid, uid)


@functools.lru_cache(maxsize=8)
def _works(sandbox: Bubblewrap) -> bool:
    """One trial run per configuration and process (about a millisecond of bubblewrap)."""
    true = shutil.which("true", path=_SYSTEM_PATH)
    if true is None:
        return False
    import tempfile

    with tempfile.TemporaryDirectory(prefix="skald-sandbox-probe-") as workspace:
        launch = sandbox.launch(true, ["true"], workspace=workspace, env={"PATH": _SYSTEM_PATH})
        try:
            completed = subprocess.run(**launch.popen_kwargs(), stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
    return completed.returncode == 0
