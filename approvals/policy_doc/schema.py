"""The published JSON Schema of the policy document (``schema.json`` beside this module)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_PATH = Path(__file__).with_name("schema.json")


@cache
def _schema_text() -> str:
    return SCHEMA_PATH.read_text(encoding="utf-8")


def policy_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) a policy document conforms to; a fresh copy each call."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema
