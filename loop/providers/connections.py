"""Kept-alive HTTPS connections to model providers, one client per destination and process (issue 34).

A client per call made a TCP connection and a TLS handshake for every model call (two per one-tool
turn): about 7 % of a worker's time through the production stack. Here a process keeps one
``httpx.Client`` per pinned destination (the screened address, port, TLS name, CA file and
timeouts), so a connection is reused while the server keeps it open (httpx's pool: at most
:data:`MAX_CONNECTIONS` a destination, idle ones closed after :data:`KEEPALIVE_SECONDS`).

Nothing about the SSRF screen changes: the caller resolves and screens the host for every call and
asks for the client of the address it pinned, so a name that now resolves elsewhere gets another
client. A cancel still interrupts a blocked read: the network streams of these clients hand their
socket to the calling thread's :class:`SocketSink` (set with :func:`capturing`) whenever the request
writes or reads, for a connection just opened and for a reused one alike.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import httpcore
import httpx

MAX_CLIENTS = 16  # destinations kept per process; the least recently used one is closed beyond that
MAX_CONNECTIONS = 32
KEEPALIVE_SECONDS = 5.0

_local = threading.local()
_lock = threading.Lock()
_clients: OrderedDict[tuple[Any, ...], httpx.Client] = OrderedDict()


class SocketSink(Protocol):
    def attach(self, sock: socket.socket | None) -> None: ...


@contextmanager
def capturing(sink: SocketSink) -> Iterator[None]:
    """While the block runs, this thread's requests hand their connection's socket to ``sink``."""
    previous = getattr(_local, "sink", None)
    _local.sink = sink
    try:
        yield
    finally:
        _local.sink = previous


@contextmanager
def reads_within(seconds: float) -> Iterator[None]:
    """While the block runs, no read of this thread's requests waits longer than ``seconds`` (then
    httpcore raises a read timeout and drops that connection): a bound set by the caller, not a
    thread of its own."""
    previous = getattr(_local, "read_cap", None)
    _local.read_cap = seconds
    try:
        yield
    finally:
        _local.read_cap = previous


def _hand_over(stream: httpcore.NetworkStream) -> None:
    sink = getattr(_local, "sink", None)
    if sink is not None:
        sink.attach(stream.get_extra_info("socket"))


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        _hand_over(self._inner)
        cap = getattr(_local, "read_cap", None)
        if cap is not None and (timeout is None or timeout > cap):
            timeout = cap
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _hand_over(self._inner)
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        stream = _Stream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))
        _hand_over(stream)
        return stream

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Transport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose streams hand their socket over. httpx takes no
    network backend of its own, so the pool it built is replaced by an equal one that has it."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(verify=context, retries=0, trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=context, max_connections=MAX_CONNECTIONS,
                                             max_keepalive_connections=MAX_CONNECTIONS,
                                             keepalive_expiry=KEEPALIVE_SECONDS, retries=0,
                                             network_backend=_Backend())


def client_for(pinned: str, port: int, server_name: str, ca_file: str, context: ssl.SSLContext,
               timeout: httpx.Timeout) -> httpx.Client:
    """This process's client for one pinned destination (made on first use)."""
    key = (pinned, port, server_name, ca_file, timeout.connect, timeout.read, timeout.write, timeout.pool)
    with _lock:
        client = _clients.get(key)
        if client is not None:
            _clients.move_to_end(key)
            return client
        client = httpx.Client(transport=_Transport(context), trust_env=False, follow_redirects=False, timeout=timeout)
        _clients[key] = client
        evicted = _clients.popitem(last=False)[1] if len(_clients) > MAX_CLIENTS else None
    if evicted is not None:
        evicted.close()
    return client


def close_all() -> None:
    """Close every kept connection (tests; a process that changes its provider profile)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def _forget_in_child() -> None:
    # A forked worker (django-q2 forks its workers) must not share its parent's sockets: drop the
    # references without closing (closing would not touch the parent's connections, but a TLS stream
    # shared by two processes is corrupt the moment both use it). The lock may have been held by
    # another thread of the parent at the fork: the child gets a new one.
    global _lock
    _lock = threading.Lock()
    _clients.clear()


os.register_at_fork(after_in_child=_forget_in_child)
