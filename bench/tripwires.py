"""Credential tripwire figures for ``make bench`` (SPEC L16): recall on generated fakes, the false
positive rate on benign lines (generated, and this repository's own non-test source and docs),
and the detector's cost per 64 KiB on ordinary and on hostile text."""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

from loop.tripwires import ScanStats, default_detector
from tests.loop.tripwire_corpus import SIZE, benign_lines, pathological_inputs, placed_fakes

BASE_DIR = Path(__file__).resolve().parent.parent
SEEDS = range(16, 26)
REPEATS = 9


def _repo_lines() -> list[str]:
    """Lines of tracked source and docs outside tests/ (the tests hold fakes on purpose)."""
    names = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.html", "*.toml", "*.js", "*.css"], cwd=BASE_DIR,
                           capture_output=True, text=True, check=False).stdout.split()
    lines: list[str] = []
    for name in names:
        if name.startswith("tests/") or name.endswith("gitleaks.toml"):
            continue
        lines += [line for line in (BASE_DIR / name).read_text(encoding="utf-8", errors="replace").splitlines()
                  if line.strip()]
    return lines


def _ms_per_64k(text: str) -> tuple[float, ScanStats]:
    detector, stats, timings = default_detector(), ScanStats(), []
    for _ in range(REPEATS):
        stats = ScanStats()
        started = time.perf_counter()
        detector.kinds(text, stats)
        timings.append((time.perf_counter() - started) * 1000 * SIZE / max(len(text), 1))
    return statistics.median(timings), stats


def report() -> str:
    detector = default_detector()
    cases = [case for seed in SEEDS for case in placed_fakes(seed)]
    caught = sum(fake.kind in detector.kinds(text) for _placement, fake, text in cases)
    generated = [line for seed in SEEDS for line in benign_lines(seed, 1000)]
    flagged = sum(bool(detector.kinds(line)) for line in generated)
    repo = _repo_lines()
    repo_flagged = sum(bool(detector.kinds(line)) for line in repo)
    ordinary = "\n".join(benign_lines(7, 2000))[:SIZE]
    ordinary_ms, _ = _ms_per_64k(ordinary)
    hostile = {name: _ms_per_64k(text)[0] for name, text in pathological_inputs().items()}
    worst = max(hostile, key=lambda name: hostile[name])
    kinds = len({fake.kind for _p, fake, _t in cases})
    return "\n".join([
        f"rules: {len(detector.rules)} (gitleaks vendored + skald)",
        f"recall: {caught}/{len(cases)} = {100 * caught / len(cases):.2f} % "
        f"({kinds} kinds x 4 placements x {len(SEEDS)} seeds)",
        f"false positives, generated benign lines: {flagged}/{len(generated)} = {100 * flagged / len(generated):.3f} %",
        f"false positives, this repository's non-test lines: {repo_flagged}/{len(repo)} = "
        f"{100 * repo_flagged / max(len(repo), 1):.3f} %",
        f"cost per 64 KiB, ordinary operational text: {ordinary_ms:.1f} ms (median of {REPEATS})",
        f"cost per 64 KiB, hostile text: median {statistics.median(hostile.values()):.1f} ms, "
        f"worst {hostile[worst]:.0f} ms ({worst})",
    ])


if __name__ == "__main__":
    print(report())
