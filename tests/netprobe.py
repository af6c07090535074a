"""A loopback listener that tells whether anyone connected: how the confinement tests prove a command
reached no network (the kernel queues a connection before the client's command ends)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def loopback_listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    try:
        yield server
    finally:
        server.close()


def anyone_connected(listener: socket.socket) -> bool:
    try:
        peer, _ = listener.accept()
    except BlockingIOError:
        return False
    peer.close()
    return True
