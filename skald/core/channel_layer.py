"""A channel layer that carries group messages across processes on one machine, with no service:
each receiving process binds a Unix datagram socket in a shared directory, and ``group_send``
delivers locally and writes one datagram to every other socket there.

This is the embedded profile's layer (SPEC "Profiles": the channel layer only as a wake-up): the
qcluster worker's commit wakes and live token deltas reach daphne's websockets within
milliseconds. Production uses channels-redis. Like Redis pub/sub here, it is best effort by
design — a full or vanished receiver drops the datagram — because nothing durable travels on
it: consumers read events from the session-event log, and a wake that is lost is caught by the
consumer's poll.

Why not channels-lite (the maintained SQLite layer we evaluated)? It polls a table in the main
SQLite file, which adds writes and lock contention beside the kernel's own on the one database
the embedded profile has, and its latency is its polling interval; its 0.4 release still lists
basic error handling as to-do. A datagram per receiver is a few dozen lines and sub-millisecond.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import logging
import os
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any

from channels.layers import InMemoryChannelLayer

logger = logging.getLogger(__name__)

MAX_DATAGRAM = 60_000  # well under Linux's default socket buffer; bigger messages stay local


class LocalFanoutChannelLayer(InMemoryChannelLayer):
    """``InMemoryChannelLayer`` plus cross-process ``group_send`` through ``directory``."""

    def __init__(self, directory: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.base = Path(directory)
        self._inbox: socket.socket | None = None
        self._inbox_path: Path | None = None
        self._inbox_pid = 0
        self._serving: asyncio.AbstractEventLoop | None = None  # the loop the consumers' queues live on
        self._outbox: tuple[int, socket.socket] | None = None
        self._directories: dict[str, Path] = {}

    @property
    def directory(self) -> Path:
        """One directory per database: the processes that share a database (daphne and its
        workers) share a layer, and a test process with its own test database talks to nobody."""
        from django.db import connection

        name = str(connection.settings_dict.get("NAME") or "")
        directory = self._directories.get(name)  # on every send: hash each database's name once
        if directory is None:
            # Under the temp dir, not ``base``: a Unix socket path must stay under 108 bytes.
            key = f"{self.base}\0{name}"
            directory = Path(tempfile.gettempdir()) / f"skald-channels-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
            self._directories[name] = directory
        return directory

    # -- receiving: bound lazily, by the process that serves consumers (daphne)

    async def group_add(self, group: str, channel: str) -> None:
        await super().group_add(group, channel)
        loop = asyncio.get_running_loop()
        if self._inbox is None or self._inbox_pid != os.getpid():
            self._bind(loop)
        elif self._serving is not loop:
            self._serve_on(loop)

    def _serve_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Consumers now live on ``loop`` (one loop per test; daphne keeps one): the inbox's reader
        and the hand-off from other threads' loops follow it."""
        assert self._inbox is not None
        if self._serving is not None and not self._serving.is_closed():
            self._serving.call_soon_threadsafe(self._serving.remove_reader, self._inbox.fileno())
        loop.add_reader(self._inbox.fileno(), self._on_datagram, self._inbox)
        self._serving = loop

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        inbox.bind(str(path))
        inbox.setblocking(False)
        loop.add_reader(inbox.fileno(), self._on_datagram, inbox)
        self._inbox, self._inbox_path, self._inbox_pid = inbox, path, os.getpid()
        self._serving = loop

    def _on_datagram(self, inbox: socket.socket) -> None:
        while True:
            try:
                data = inbox.recv(MAX_DATAGRAM + 1024)
            except (BlockingIOError, InterruptedError):
                return
            try:
                envelope = json.loads(data)
                group, message = envelope["group"], envelope["message"]
            except (ValueError, KeyError, TypeError):
                logger.debug("dropped a malformed datagram")
                continue
            asyncio.get_running_loop().create_task(super().group_send(group, message))

    # -- sending: to this process's own consumers, then to every other process's socket

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        serving = self._serving if self._inbox_pid == os.getpid() else None  # a fork serves nothing yet
        if serving is not None and serving is not asyncio.get_running_loop() and not serving.is_closed():
            # Sent from another thread's loop (a sync view's commit, the bus's background loop): the
            # consumers' asyncio queues belong to the serving loop, and only that loop may wake them.
            asyncio.run_coroutine_threadsafe(super().group_send(group, message), serving)
        else:
            await super().group_send(group, message)
        self._send_datagrams(group, message)

    def group_send_now(self, group: str, message: dict[str, Any]) -> bool:
        """Send from any thread, with no event loop, when this process serves no consumers (a
        worker, a script): the datagrams to the other processes are all there is to do. Returns
        False, sending nothing, when this process has consumers (use ``group_send`` on a loop)."""
        if self.groups or (self._inbox is not None and self._inbox_pid == os.getpid()):
            return False
        self._send_datagrams(group, message)
        return True

    def _send_datagrams(self, group: str, message: dict[str, Any]) -> None:
        try:
            data = json.dumps({"group": group, "message": message}, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            return  # not JSON: it can only be delivered here
        if len(data) > MAX_DATAGRAM:
            logger.debug("group message of %d bytes stays in this process", len(data))
            return
        self._fan_out(data)

    def _sender(self) -> socket.socket:
        # A forked worker must not share its parent's socket object.
        if self._outbox is None or self._outbox[0] != os.getpid():
            sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sender.setblocking(False)
            self._outbox = (os.getpid(), sender)
        return self._outbox[1]

    def _fan_out(self, data: bytes) -> None:
        try:
            targets = [p for p in self.directory.iterdir() if p.suffix == ".sock" and p != self._inbox_path]
        except FileNotFoundError:
            return  # no receiver has bound yet
        sender = self._sender()
        for target in targets:
            try:
                sender.sendto(data, str(target))
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()  # its process is gone
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    logger.debug("datagram to %s failed: %r", target.name, exc)

    def close_inbox(self) -> None:
        """Unbind (tests and shutdown); a process that exits without it leaves a socket the next
        sender removes."""
        if self._inbox is not None:
            with contextlib.suppress(Exception):
                asyncio.get_event_loop().remove_reader(self._inbox.fileno())
            self._inbox.close()
            if self._inbox_path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._inbox_path.unlink()
            self._inbox = self._inbox_path = None
