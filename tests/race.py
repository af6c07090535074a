"""Run one call from N threads released together by a barrier; collect every answer or error."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

WAIT = 60.0  # seconds every racer may take; a hung racer fails the test instead of hanging it


def race(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` in ``n`` threads at once; returns each result (or the exception it raised) in order."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def racer(i: int) -> None:
        try:
            barrier.wait(WAIT)
            results[i] = call(i)
        except BaseException as exc:  # the test inspects it
            results[i] = exc
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=racer, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "a racer hung"
    return results
