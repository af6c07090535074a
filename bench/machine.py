"""How fast this machine runs Python: a fixed CPU-bound workload, timed, so that figures taken on
different machines (or on one machine whose host is busier one day than another) can be compared.

The workload does what a turn's own Python does most: build small dicts, serialise them as
canonical JSON, hash the text and format strings. It touches no database, no disk and no thread,
so its time is this process's CPU speed and nothing else. A turn's CPU divided by it is a
machine-independent figure: how many reference workloads one turn costs.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time

ROUNDS = 2_000
SAMPLES = 7


def _workload() -> int:
    digest = b""
    total = 0
    for number in range(ROUNDS):
        payload = {"seq": number, "kind": "tool_result", "call_id": f"call_{number % 7}",
                   "content": f"echo: ping {number}", "is_error": number % 11 == 0}
        body = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(digest + body.encode("utf-8")).digest()
        total += len(body) + sum(1 for key in payload if key.startswith("c"))
    return total + digest[0]


def reference_ms(samples: int = SAMPLES) -> float:
    """Median CPU milliseconds of the reference workload in this process (after one warm-up run)."""
    _workload()
    timings = []
    for _ in range(samples):
        started = time.process_time()
        _workload()
        timings.append(time.process_time() - started)
    return statistics.median(timings) * 1000
