"""The stack under load: a fresh PostgreSQL database owned by a plain (non-superuser) role, a
flushed Redis database, ``python -m skald.launcher`` (daphne + ``SKALD_QCLUSTERS`` qclusters, via
``tests/e2e/stack.py``), a benchmark agent whose playbook calls three real, ungated tools, and the
probes the load test reads: process CPU from ``/proc`` and server connections from ``pg_stat_activity``.
Loopback only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.procstat import cpu_seconds
from tests.e2e.stack import Stack, launch

ADMIN_URL = os.environ.get("BENCH_LOAD_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DATABASE = os.environ.get("BENCH_LOAD_DATABASE", "skald_bench_load")
APP_ROLE = os.environ.get("BENCH_LOAD_ROLE", "skald_bench_app")
REDIS_URL = os.environ.get("BENCH_LOAD_REDIS_URL", "redis://127.0.0.1:6379/8")
QCLUSTERS, Q_WORKERS = 2, 2
WEB_POOL_MAX, WORKER_POOL_MAX = 8, 6
HTTP_WAIT_S = 15
# Processes of one qcluster that may open database connections: the leader, the sentinel (the
# scheduler), the monitor (saves results) and each worker. The pusher speaks only to Redis.
CONNECTING_PER_CLUSTER = 3 + Q_WORKERS

BENCH_AGENT = {
    "name": "bench", "kind": "chat", "description": "Load test: three ungated tools per message",
    "system_prompt": "You note, search and read back.",
    "allowed_tools": ["scratchpad_set", "search_knowledge", "scratchpad_get"],
    "playbook": [
        {"tool": "scratchpad_set", "args": {"key": "note", "value": "{input}"}},
        {"tool": "search_knowledge", "args": {"query": "{input}"}},
        {"tool": "scratchpad_get", "args": {"key": "note"}},
        {"answer": "noted and searched: {last_result}"},
    ],
}
# The issue-34 exchange (``bench.stack_cost``): two model calls around one ungated tool. Its model is
# a real HTTPS provider on loopback; the playbook only serves when none is configured.
ONE_TOOL_AGENT = {
    "name": "bench-one-tool", "kind": "chat", "description": "Stack cost: one ungated tool per message",
    "system_prompt": "You search, then answer.",
    "allowed_tools": ["search_knowledge"],
    "playbook": [{"tool": "search_knowledge", "args": {"query": "{input}"}}, {"answer": "found: {last_result}"}],
}


PROBE_NAME = "skald-bench-probe"  # the bench's own connections, left out of the counts


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(ADMIN_URL.replace("postgres://", "postgresql://", 1), autocommit=True, connect_timeout=5,
                           application_name=PROBE_NAME)


def recreate_database() -> str:
    """A fresh database owned by a plain login role; returns the application's DATABASE_URL."""
    with _admin() as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [APP_ROLE]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB").format(
                sql.Identifier(APP_ROLE)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(DATABASE), sql.Identifier(APP_ROLE)))
    params = conninfo_to_dict(ADMIN_URL.replace("postgres://", "postgresql://", 1))
    return f"postgres://{APP_ROLE}@{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}/{DATABASE}"


def flush_redis() -> None:
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


def seed_agent() -> None:
    """Run inside the stack's environment (``python -m bench.loadstack --seed``)."""
    import django

    django.setup()
    from skald.models import Agent

    for agent in (BENCH_AGENT, ONE_TOOL_AGENT):
        fields = {k: v for k, v in agent.items() if k != "name"}
        Agent.objects.update_or_create(name=agent["name"], defaults=fields)


@dataclass
class BenchStack:
    stack: Stack
    env: dict[str, str]
    config: dict[str, Any]
    daphne_pid: int = 0
    worker_pids: list[int] = field(default_factory=list)
    sampling: bool = True
    peak_total: int = 0
    peak_by_role: Counter[str] = field(default_factory=Counter)
    samples: int = 0

    def token(self) -> str:
        return self.stack.token("operator")

    def client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.stack.base_url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=60.0, limits=httpx.Limits(max_connections=200, max_keepalive_connections=200))

    def find_processes(self) -> None:
        tree = self.stack.remember_tree()
        # The launcher serves daphne in a child of its own (``python -m skald.launcher --serve``).
        self.daphne_pid = next(p.pid for p in tree if "daphne" in p.cmdline or "skald.launcher --serve" in p.cmdline)
        self.worker_pids = [p.pid for p in tree if "qcluster" in p.cmdline]

    def cpu(self) -> dict[str, float]:
        self.find_processes()  # django-q2 may have recycled a worker
        return {"daphne": cpu_seconds([self.daphne_pid]), "workers": cpu_seconds(self.worker_pids)}

    def sample_connections(self) -> None:
        with _admin() as conn:
            while self.sampling:
                rows = conn.execute(
                    "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s "
                    "AND application_name <> %s GROUP BY 1", [DATABASE, PROBE_NAME]).fetchall()
                total = sum(n for _, n in rows)
                self.peak_total = max(self.peak_total, total)
                for role, n in rows:
                    self.peak_by_role[role or "?"] = max(self.peak_by_role[role or "?"], n)
                self.samples += 1
                time.sleep(0.1)

    def connection_report(self) -> dict[str, Any]:
        ceiling = WEB_POOL_MAX + QCLUSTERS * CONNECTING_PER_CLUSTER * WORKER_POOL_MAX
        return {"peak_total": self.peak_total, "peak_by_role": dict(self.peak_by_role), "samples": self.samples,
                "ceiling_total": ceiling,
                "ceiling_formula": f"web {WEB_POOL_MAX} + {QCLUSTERS} qclusters x {CONNECTING_PER_CLUSTER} "
                                   f"connecting processes x {WORKER_POOL_MAX}"}

    def _query(self, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(make_conninfo(ADMIN_URL.replace("postgres://", "postgresql://", 1), dbname=DATABASE),
                             autocommit=True, application_name=PROBE_NAME) as conn:
            return conn.execute(query, params or []).fetchall()

    def exchange_rows(self, ids: list[int]) -> list[dict[str, Any]]:
        rows = self._query("SELECT id, status, EXTRACT(EPOCH FROM settled_at - created_at) FROM loop_exchange "
                           "WHERE id = ANY(%s)", [ids])
        return [{"id": i, "status": s, "seconds": float(sec) if sec is not None else None} for i, s, sec in rows]

    def wait_all_terminal(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._query("SELECT 1 FROM loop_exchange WHERE status IN ('open', 'parked') LIMIT 1"):
                return
            time.sleep(0.5)

    def store_totals(self) -> dict[str, int]:
        (exchanges, broken, stuck), = self._query(
            "SELECT count(*), count(*) FILTER (WHERE status = 'broken'), "
            "count(*) FILTER (WHERE status IN ('open', 'parked')) FROM loop_exchange")
        (calls, failed), = self._query(
            "SELECT count(*), count(*) FILTER (WHERE is_error OR status NOT IN ('completed')) FROM loop_toolcall")
        return {"exchanges": exchanges, "broken_exchanges": broken, "stuck_exchanges": stuck,
                "tool_calls": calls, "failed_tool_calls": failed}


@contextmanager
def start_stack(tmp: Path, extra_env: dict[str, str] | None = None) -> Iterator[BenchStack]:
    database_url = recreate_database()
    flush_redis()
    env = {
        "DATABASE_URL": database_url, "REDIS_URL": REDIS_URL, "SKALD_DEBUG": "0",
        "SKALD_SECRET_KEY": "bench-load-secret-key-" + "x" * 40, "SKALD_ALLOWED_HOSTS": "127.0.0.1,localhost",
        # Loopback without a proxy: nothing redirects (and the check is told why).
        "SKALD_SSL_REDIRECT": "0", "SKALD_PROXY_REDIRECTS_HTTP": "1", "SKALD_LOG_LEVEL": "WARNING",
        "SKALD_QCLUSTERS": str(QCLUSTERS), "SKALD_Q_WORKERS": str(Q_WORKERS),
        "SKALD_DB_POOL_MAX": str(WEB_POOL_MAX), "SKALD_DB_WORKER_POOL_MAX": str(WORKER_POOL_MAX),
        # Patient clients: on a 2-core machine shared with other sessions (load average 15-25) a
        # request can queue longer than the 5 s default before it gets a slot; the test is about
        # errors and bounds, so the bounded wait is 15 s here (still bounded: then 503 server_busy).
        "SKALD_HTTP_WAIT_SECONDS": str(HTTP_WAIT_S), "SKALD_DB_POOL_TIMEOUT": str(HTTP_WAIT_S),
        "SKALD_METRICS_TOKEN": "bench", "SKALD_AUDIT_KEY": "bench",
        **(extra_env or {}),
    }
    stack = launch(tmp / "var", env)
    try:
        seeded = subprocess.run([sys.executable, "-m", "bench.loadstack", "--seed"], cwd=Path(__file__).parent.parent,
                                env={**os.environ, **env, "SKALD_VAR_DIR": str(stack.var_dir),
                                     "DJANGO_SETTINGS_MODULE": "skald.settings"},
                                capture_output=True, text=True, timeout=120, check=False)
        assert seeded.returncode == 0, seeded.stderr[-2000:]
        bench = BenchStack(stack=stack, env=env, config={
            "database_url": database_url, "redis_url": REDIS_URL, "qclusters": QCLUSTERS, "q_workers": Q_WORKERS,
            "web_pool_max": WEB_POOL_MAX, "worker_pool_max": WORKER_POOL_MAX, "http_wait_s": HTTP_WAIT_S})
        bench.find_processes()
        yield bench
    finally:
        stack.stop()


if __name__ == "__main__" and sys.argv[1:] == ["--seed"]:
    seed_agent()
