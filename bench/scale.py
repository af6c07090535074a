"""Scale through the real django-q2 path (issue 14): K sessions x W qcluster workers on PostgreSQL.

This process admits (``skald.sessions.services.session_message_submit``, exactly what the web
process runs for ``POST …/messages/``); a ``manage.py qcluster`` with W workers drives each
exchange (``skald.tasks.run_kernel_turn``) over Redis. A benchmark agent's playbook asks for one
ungated built-in tool (``scratchpad_get``) and answers: a one-tool exchange, two model turns,
loopback only. Each of the K sessions posts its next message as soon as its previous exchange is
settled (closed loop).

Per (K, W): exchanges per second (settled ÷ wall time from the first admission to the last
settlement), p50/p99 admission→settled (the exchange rows' own timestamps), and the audit chain's
lock as the workers saw it: a sampler reads ``pg_stat_activity`` every 10 ms and counts, of the
samples in which a worker's backend was inside a transaction, the share waiting for the chain's
advisory lock (and for any other lock: the session row). Then the memory line: RSS of every
qcluster worker after 100 and after ``--rss-exchanges`` (default 1,000) exchanges on 4 sessions,
so the history grows (``SKALD_Q_RECYCLE`` keeps django-q2 from replacing the worker meanwhile; its
default replaces a worker after 500 tasks).

Run: ``python -m bench.scale`` (``--k 1,8,32 --w 1,2,4``). The database is
``BENCH_SCALE_DATABASE_URL`` (default ``…/skald_bench_scale``, recreated), Redis
``BENCH_SCALE_REDIS_URL`` (default db 9, flushed). JSON goes to ``var/bench/scale-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skald.core.child_env import hermetic_env

BASE_DIR = Path(__file__).resolve().parent.parent
DATABASE_URL = os.environ.get("BENCH_SCALE_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/skald_bench_scale")
REDIS_URL = os.environ.get("BENCH_SCALE_REDIS_URL", "redis://127.0.0.1:6379/9")
KS, WS = (1, 8, 32), (1, 2, 4)
MIN_EXCHANGES, ROUNDS = 40, 3  # per (K, W): at least 40 exchanges and 3 per session
EXCHANGE_TIMEOUT_S = 120.0
BENCH_AGENT = {
    "kind": "chat", "description": "Scale bench: one ungated tool per message",
    "system_prompt": "You read a note back.", "allowed_tools": ["scratchpad_get"],
    "playbook": [{"tool": "scratchpad_get", "args": {"key": "note"}}, {"answer": "read: {last_result}"}],
}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Point:
    k: int
    w: int
    exchanges: int
    settled: int
    wall_s: float
    per_s: float
    p50_s: float
    p99_s: float
    tx_samples: int  # worker backends seen inside a transaction
    chain_wait_share: float  # of those, waiting for the chain's advisory lock
    other_lock_share: float  # waiting for another lock (the session row, a tuple)
    mean_waiting_on_chain: float  # backends waiting for the chain lock, averaged over all samples


@dataclass
class Report:
    load_at_start: float
    cpus: int
    database: str
    points: list[Point] = field(default_factory=list)
    rss: dict[str, Any] = field(default_factory=dict)


# --- the environment --------------------------------------------------------------------------


def _env(var_dir: Path, workers: int, recycle: int = 0) -> dict[str, str]:
    env = hermetic_env(DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, SKALD_VAR_DIR=str(var_dir), SKALD_DEBUG="0",
                       SKALD_LOG_LEVEL="WARNING", SKALD_SECRET_KEY="bench-scale-secret-key-" + "x" * 40,
                       SKALD_Q_WORKERS=str(workers))
    if recycle:
        env["SKALD_Q_RECYCLE"] = str(recycle)
    return env


def recreate() -> None:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = str(conninfo_to_dict(DATABASE_URL)["dbname"])
    with psycopg.connect(make_conninfo(DATABASE_URL, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


def setup_django(var_dir: Path) -> None:
    os.environ.update(_env(var_dir, 1))
    from skald.core.var import var_dir_prepare

    var_dir_prepare(var_dir)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def seed() -> Any:
    """The bench agent and an operator who writes to it."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from skald.models import Agent

    Agent.objects.update_or_create(name="bench", defaults=BENCH_AGENT)
    user = get_user_model().objects.create_user(username="bench-operator")
    user.groups.add(Group.objects.get(name="operator"))
    return user


class Workers:
    """``manage.py qcluster`` with W workers, in its own process group."""

    def __init__(self, var_dir: Path, workers: int, recycle: int = 0) -> None:
        self.log = open(var_dir / f"qcluster-{workers}.log", "wb")  # closed in stop()
        self.process = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=BASE_DIR,
                                        env=_env(var_dir, workers, recycle), stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def pids(self) -> list[int]:
        from tests.e2e.stack import descendants

        return [self.process.pid, *(proc.pid for proc in descendants(self.process.pid))]

    def stop(self) -> None:
        import signal

        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()


def cpu_ticks(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# --- the lock sampler --------------------------------------------------------------------------


class LockSampler:
    """Every 10 ms: the worker backends inside a transaction, and what they wait for."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psycopg
        from psycopg.conninfo import make_conninfo

        with psycopg.connect(make_conninfo(DATABASE_URL), autocommit=True, application_name="skald-bench-probe") as c:
            while self.running:
                rows = c.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE "
                    "datname = current_database() AND application_name = 'skald-worker' "
                    "AND xact_start IS NOT NULL").fetchall()
                self.samples += 1
                for _state, wait_type, wait_event in rows:
                    self.counts["in_transaction"] += 1
                    if wait_type == "Lock":
                        self.counts["chain" if wait_event == "advisory" else "other_lock"] += 1
                time.sleep(0.01)

    def stop(self) -> Counter[str]:
        self.running = False
        self.thread.join()
        return self.counts


# --- driving -------------------------------------------------------------------------------------


def drive(user: Any, sessions: list[Any], total: int) -> tuple[list[int], float]:
    """Closed loop: each session posts its next message once its previous exchange ended, until
    ``total`` exchanges are admitted and all have ended. Returns their ids and the wall time."""
    from loop.models import Exchange
    from skald.sessions.services import session_message_submit

    open_by_session: dict[int, int] = {}
    admitted: list[int] = []
    started = time.perf_counter()
    deadline = time.monotonic() + EXCHANGE_TIMEOUT_S + total * 2.0
    while True:
        if open_by_session:
            ended = dict(Exchange.objects.filter(pk__in=list(open_by_session.values()))
                         .exclude(status__in=("open",)).values_list("pk", "status"))
            open_by_session = {s: e for s, e in open_by_session.items() if e not in ended}
        for session in sessions:
            if session.pk not in open_by_session and len(admitted) < total:
                exchange, _replayed = session_message_submit(user=user, session=session,
                                                             content=f"message {len(admitted) + 1}")
                open_by_session[session.pk] = exchange.pk
                admitted.append(exchange.pk)
        if not open_by_session and len(admitted) >= total:
            return admitted, time.perf_counter() - started
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(open_by_session)} exchanges did not end in time")
        time.sleep(0.005)


def measure_point(user: Any, k: int, w: int) -> Point:
    from django.db.models import F

    from loop.models import Exchange
    from skald.sessions.services import session_create

    sessions = [session_create(user=user, agent="bench", title=f"k{k}w{w}-{i}") for i in range(k)]
    total = max(MIN_EXCHANGES, ROUNDS * k)
    drive(user, sessions[:1], 1)  # the workers import and connect: not part of the figure
    sampler = LockSampler()
    ids, wall = drive(user, sessions, total)
    counts = sampler.stop()
    rows = list(Exchange.objects.filter(pk__in=ids).annotate(took=F("settled_at") - F("created_at"))
                .values_list("status", "took"))
    seconds = [took.total_seconds() for status, took in rows if status == "settled" and took is not None]
    in_tx = counts["in_transaction"]
    return Point(k=k, w=w, exchanges=len(ids), settled=len(seconds), wall_s=wall, per_s=len(seconds) / wall,
                 p50_s=pct(seconds, 50), p99_s=pct(seconds, 99), tx_samples=in_tx,
                 chain_wait_share=counts["chain"] / in_tx if in_tx else 0.0,
                 other_lock_share=counts["other_lock"] / in_tx if in_tx else 0.0,
                 mean_waiting_on_chain=counts["chain"] / max(1, sampler.samples))


def measure_rss(user: Any, var_dir: Path, exchanges: int) -> dict[str, Any]:
    """RSS of the qcluster's one worker (W=1, never recycled during the run) after 100 and after
    ``exchanges`` exchanges on 4 sessions. The worker is the process that spent the most CPU."""
    from skald.sessions.services import session_create

    workers = Workers(var_dir, 1, recycle=exchanges * 10)
    try:
        sessions = [session_create(user=user, agent="bench", title=f"rss-{i}") for i in range(4)]
        drive(user, sessions, 100)
        first = {pid: (rss_kb(pid), cpu_ticks(pid)) for pid in workers.pids()}
        drive(user, sessions, exchanges - 100)
        last = {pid: (rss_kb(pid), cpu_ticks(pid)) for pid in workers.pids()}
    finally:
        workers.stop()
    worker = max(last, key=lambda pid: last[pid][1] - first.get(pid, (0, 0))[1])
    return {"exchanges": exchanges, "worker_pid": worker, "worker_after_100_kb": first.get(worker, (0, 0))[0],
            f"worker_after_{exchanges}_kb": last[worker][0],
            "all_after_100_kb": {pid: v[0] for pid, v in first.items()},
            f"all_after_{exchanges}_kb": {pid: v[0] for pid, v in last.items()},
            "recycled": sorted(set(first) ^ set(last))}


# --- reporting -----------------------------------------------------------------------------------


def table(report: Report) -> str:
    lines = [f"K sessions x W qcluster workers, PostgreSQL + Redis, one-tool exchanges (load average "
             f"{report.load_at_start:.2f} at start, {report.cpus} CPUs)",
             f"{'K':>3} {'W':>3} {'exch':>5} {'exch/s':>7} {'p50 s':>7} {'p99 s':>7} {'chain wait':>11} "
             f"{'other lock':>11} {'tx samples':>11}"]
    for p in report.points:
        lines.append(f"{p.k:>3} {p.w:>3} {p.settled:>5} {p.per_s:>7.2f} {p.p50_s:>7.3f} {p.p99_s:>7.3f} "
                     f"{p.chain_wait_share:>10.1%} {p.other_lock_share:>10.1%} {p.tx_samples:>11}")
    if report.rss:
        n = report.rss["exchanges"]
        lines.append(f"RSS of the worker (W=1, not recycled): {report.rss['worker_after_100_kb'] / 1024:.1f} MiB "
                     f"after 100 exchanges, {report.rss[f'worker_after_{n}_kb'] / 1024:.1f} MiB after {n}"
                     + (f" (pids replaced meanwhile: {report.rss['recycled']})" if report.rss["recycled"] else ""))
    lines.append("chain wait = share of the samples of a worker backend inside a transaction in which it waited "
                 "for the audit chain's advisory lock; other lock = waiting for any other lock.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--k", default=",".join(map(str, KS)))
    parser.add_argument("--w", default=",".join(map(str, WS)))
    parser.add_argument("--rss-exchanges", type=int, default=1000, help="0 skips the memory line")
    parser.add_argument("--result-file", type=Path)
    args = parser.parse_args(argv)
    report = Report(load_at_start=os.getloadavg()[0], cpus=os.cpu_count() or 0, database=DATABASE_URL)
    recreate()
    with tempfile.TemporaryDirectory(prefix="skald-scale-") as tmp:
        var_dir = Path(tmp) / "var"
        setup_django(var_dir)
        user = seed()
        for w in (int(x) for x in args.w.split(",")):
            workers = Workers(var_dir, w)
            try:
                for k in (int(x) for x in args.k.split(",")):
                    point = measure_point(user, k, w)
                    report.points.append(point)
                    print(f"  K={k:<3} W={w}: {point.settled}/{point.exchanges} settled, {point.per_s:.2f}/s, "
                          f"p50 {point.p50_s:.3f} s, p99 {point.p99_s:.3f} s, chain wait "
                          f"{point.chain_wait_share:.1%}", flush=True)
            finally:
                workers.stop()
        if args.rss_exchanges:
            report.rss = measure_rss(user, var_dir, args.rss_exchanges)
    print(table(report), flush=True)
    out = args.result_file or BASE_DIR / "var" / "bench" / f"scale-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    print(f"JSON: {out}", flush=True)
    broken = [p for p in report.points if p.settled != p.exchanges]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
