"""The API contract test's generated requests, drawn once per schema and reused.

schemathesis draws its cases with Hypothesis, derandomized: for one schema, one operation, one
generation mode and one example count, the cases are always the same. Drawing them is most of the
contract test's cost (more than sending them), and ``make test`` sends them twice, once per database.
So the cases are drawn once, kept in a file keyed by everything they depend on (the schema, the
operation, the mode, the count, the schemathesis and Hypothesis versions), and every later pass, on
either database, sends the very same requests again.

A file lock makes concurrent passes draw each operation once; the file is written atomically, so a
reader sees all of it or none.
"""

from __future__ import annotations

import copyreg
import fcntl
import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.core import NOT_SET
from schemathesis.core.parameters import DelimitedValue

# A delimited array parameter is a str with its wire form beside it; its __new__ takes both, which
# pickle's default for a str subclass does not pass.
copyreg.pickle(DelimitedValue, lambda value: (DelimitedValue, (str(value), value.encoded)))

# What a case is made of, besides its operation (rebuilt from the schema) and its metadata.
FIELDS = ("method", "path_parameters", "cookies", "query", "body", "media_type", "multipart_content_types")
HOME = Path(tempfile.gettempdir()) / "skald-contract-cases"


def schema_digest(schema: dict[str, Any]) -> str:
    text = json.dumps(schema, sort_keys=True, default=str)
    return hashlib.sha256(f"{text}|{version('schemathesis')}|{version('hypothesis')}".encode()).hexdigest()[:16]


def cases(operation: schemathesis.APIOperation, mode: schemathesis.GenerationMode, *, examples: int,
          digest: str) -> list[schemathesis.Case]:
    """``examples`` derandomized cases of ``operation`` in ``mode``, drawn now or read from the file
    an earlier draw (this run's other pass, or an earlier run on this machine) wrote."""
    key = hashlib.sha256(f"{digest}|{operation.label}|{mode.value}|{examples}".encode()).hexdigest()[:24]
    path = HOME / f"{key}.pickle"
    with _locked(HOME / f"{key}.lock"):
        drawn = _read(path)
        if drawn is None:
            drawn = _draw(operation, mode, examples)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(pickle.dumps(drawn))
            os.replace(partial, path)
    return [operation.Case(**{name: fields[name] for name in FIELDS if name in fields}, headers=fields["headers"],
                           _meta=fields["meta"]) for fields in drawn]


def _read(path: Path) -> list[dict[str, Any]] | None:
    """The cases an earlier draw kept, or None: none kept, or a file this version cannot read (it is
    then drawn again; a cache never fails the test)."""
    if not path.exists():
        return None
    try:
        drawn = pickle.loads(path.read_bytes())
    except Exception:  # any unreadable file: draw again
        return None
    return drawn if isinstance(drawn, list) else None


def _draw(operation: schemathesis.APIOperation, mode: schemathesis.GenerationMode,
          examples: int) -> list[dict[str, Any]]:
    drawn: list[dict[str, Any]] = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def collect(case: schemathesis.Case) -> None:
        fields = {name: getattr(case, name) for name in FIELDS}
        if fields["body"] is NOT_SET:  # a sentinel compared by identity: leave it to the rebuilt case
            del fields["body"]
        drawn.append({**fields, "headers": dict(case.headers), "meta": case._meta})

    collect()
    return drawn


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
