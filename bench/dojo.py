"""Issue 30's AgentDojo figures over the whole matrix (docs/provenance.md, "Measured against
AgentDojo"): every suite, every injectable user task, every injection task, through the suites'
tools as real untrusted MCP servers and Skald's real gate (the harness: ``tests/dojo/harness.py``;
its fixed subset is ``tests/dojo/test_agentdojo.py``).

Run by ``make bench`` in a fresh process on a fresh SQLite file; by hand::

    SKALD_VAR_DIR=$(mktemp -d) SKALD_DEBUG=0 .venv/bin/python -m bench.dojo [--user-tasks 1] [--suite banking]

Targets (informative, as every bench's): attacker calls executed without a human decision 0;
attacker calls whose approval shows the provenance banner 100 %; user-task calls that needed an
approval the default rules without provenance would not have asked for, per suite, <= 10 %.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench.kernel import configure_django


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dojo", description=__doc__.splitlines()[0])
    parser.add_argument("--result-file", type=Path)
    parser.add_argument("--user-tasks", type=int, default=None, help="the first N injectable user tasks per suite")
    parser.add_argument("--suite", action="append", help="one suite (repeatable); default all four")
    options = parser.parse_args(argv)
    configure_django()
    from django.test.utils import override_settings

    from skald.mcp.client import pool
    from tests.conftest import make_user
    from tests.dojo.harness import SUITES, Harness, figures, pairs, report, settings_for

    suites = tuple(options.suite or SUITES)
    started, cpu_started = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="skald-dojo-") as tmp, override_settings(**settings_for(Path(tmp))):
        harness = Harness(owner=make_user("dojo-owner", "operator", "workflow"),
                          approver=make_user("dojo-approver", "approver"), state_root=Path(tmp), suites=suites)
        harness.install()
        calls = []
        chosen = list(pairs(suites, user_tasks=options.user_tasks))
        try:
            for done, pair in enumerate(chosen, 1):
                calls += harness.run(*pair)
                if done % 25 == 0 or done == len(chosen):
                    print(f"  {done}/{len(chosen)} pairs, {time.perf_counter() - started:.0f} s", flush=True)
        finally:
            pool().close_all()
    result = figures(calls)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(report(result, len(chosen)), flush=True)
    print(f"  {wall:.0f} s wall, {cpu:.0f} s CPU here + {children.ru_utime + children.ru_stime:.0f} s in the "
          f"suites' MCP servers", flush=True)
    missed = sorted({f"{c.suite} {c.user_task} {c.tool}" for c in calls if c.phase == "user" and c.extra_approval})
    if missed:
        print("  user-task calls parked only because of provenance (suite, user task, tool):", flush=True)
        print("\n".join(f"    {line}" for line in missed[:40]), flush=True)
    if options.result_file:
        options.result_file.write_text(json.dumps({
            **result.as_dict(), "pairs": len(chosen), "wall_s": wall, "cpu_s": cpu,
            "calls": [asdict(c) for c in calls]}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
