"""`make test` runs xdist with ``--dist loadgroup``: a module marked ``xdist_group`` stays on one
worker, so its module-scoped stack boots once. A pytest/pytest-xdist pair can break that without a
word (pytest-xdist#1386: the tests then spread over the workers as if unmarked), so a run of two
workers over a grouped module must put every test of it on the same worker.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from skald.core.child_env import hermetic_env

pytestmark = pytest.mark.slow  # two xdist workers in a child pytest

GROUPED = """
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("number", range(6))
def test_records_its_worker(number):
    Path(os.environ["GROUPING_OUT"], str(number)).write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_a_grouped_module_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_other.py").write_text("def test_elsewhere():\n    pass\n")
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2",
         "--dist", "loadgroup", "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path)],
        # Only xdist: the suite's other plugins (Django, schemathesis, Hypothesis) would load in all
        # three processes for nothing.
        cwd=tmp_path, env=hermetic_env(GROUPING_OUT=str(out), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"),
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    workers = {path.name: path.read_text() for path in out.iterdir()}
    assert sorted(workers) == [str(number) for number in range(6)]
    assert len(set(workers.values())) == 1, f"the group was split over workers: {workers}"
