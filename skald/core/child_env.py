"""The environment of a child process that a test run, a benchmark or a crash campaign starts.

The parent's environment without what selects Skald's configuration (``SKALD_*``, the provider and
engine variables, ``DATABASE_URL``, ``REDIS_URL``, the launcher's ``HOST``/``PORT``), plus what the
caller names: a child depends on what its parent sets, never on the developer's shell.
"""

from __future__ import annotations

import os

SCRUBBED_PREFIXES = ("SKALD_", "BRAIN_GDL_PROVIDER_", "BRAIN_ENGINE_")
SCRUBBED_NAMES = frozenset({"DATABASE_URL", "REDIS_URL", "HOST", "PORT"})


def hermetic_env(**extra: str) -> dict[str, str]:
    """``os.environ`` scrubbed of Skald's configuration, with ``DJANGO_SETTINGS_MODULE`` and ``extra``."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(SCRUBBED_PREFIXES) and name not in SCRUBBED_NAMES}
    env["DJANGO_SETTINGS_MODULE"] = "skald.settings"
    env.update(extra)
    return env
