"""How hard the property tests push.

CI (``CI=true``) and ``SKALD_TEST_STRENGTH=strong`` run the full example counts (10,000 for the rule
engine's differential test); a developer's run takes a twentieth, so the quick suite stays fast.
Counts are written at full strength in the tests: ``@settings(max_examples=examples(10_000))``.
"""

from __future__ import annotations

import os

STRONG = (os.environ.get("CI", "").lower() in {"1", "true", "yes"}
          or os.environ.get("SKALD_TEST_STRENGTH", "").lower() == "strong")


def examples(full: int) -> int:
    return full if STRONG else max(10, full // 20)
