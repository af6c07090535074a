"""A Python client generated from Skald's own OpenAPI schema, the way an external team makes one.

The schema is what the schema view ``/api/schema/`` answers, then ``openapi-python-client``
(pinned in the dev extras) writes the package ``skald_client``. Generation costs seconds, so the
result is cached in the temporary directory under the schema's hash: the SQLite and PostgreSQL
passes of ``make test`` and every later run share it until the schema changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

GENERATOR = Path(sys.executable).parent / "openapi-python-client"
PACKAGE = "skald_client"
GENERATOR_CONFIG = {"package_name_override": PACKAGE, "project_name_override": "skald-client",
                    "post_hooks": []}  # no formatter run: the code is imported, not read


def live_schema() -> dict[str, Any]:
    """The OpenAPI document the schema view ``/api/schema/`` serves (it reads no database)."""
    from django.test import Client

    response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200, response.content[:500]
    return dict(response.json())


def generate(schema: dict[str, Any]) -> Path:
    """Generate (or reuse) the client for ``schema``; returns the directory that holds the package."""
    text = json.dumps(schema, sort_keys=True, default=str)
    digest = hashlib.sha256((text + version("openapi-python-client")).encode()).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"skald-api-client-{digest}"
    if (home / PACKAGE / "__init__.py").exists():
        return home
    work = Path(tempfile.mkdtemp(prefix="skald-api-client-build-"))
    try:
        (work / "schema.json").write_text(text, encoding="utf-8")
        (work / "config.json").write_text(json.dumps(GENERATOR_CONFIG), encoding="utf-8")
        result = subprocess.run(
            [str(GENERATOR), "generate", "--path", str(work / "schema.json"), "--meta", "none",
             "--output-path", str(work / "out" / PACKAGE), "--config", str(work / "config.json")],
            capture_output=True, text=True, check=False, timeout=300,
        )
        assert result.returncode == 0, f"openapi-python-client failed:\n{result.stdout}\n{result.stderr}"
        assert "Warning" not in result.stdout + result.stderr, result.stdout + result.stderr
        try:
            os.replace(work / "out", home)  # atomic: a concurrent run sees all of it or none
        except OSError:
            if not (home / PACKAGE / "__init__.py").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return home


@pytest.fixture(scope="session")
def generated_client() -> Iterator[ModuleType]:
    """The generated ``skald_client`` package, importable for the whole session."""
    home = generate(live_schema())
    sys.path.insert(0, str(home))
    try:
        import skald_client

        yield skald_client
    finally:
        sys.path.remove(str(home))
