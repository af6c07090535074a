"""The production profile: typed settings fail loudly, and `check --deploy` is clean."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from skald.core.env import envbool, envint, envlist, envstr

pytestmark = pytest.mark.slow  # most tests start manage.py in a child process

BASE = Path(__file__).resolve().parents[2]


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    secret = tmp_path / "secret_key"
    secret.write_text("x" * 60 + "production-secret-key-with-enough-entropy-1234567890")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKALD_", "BRAIN_", "DATABASE_URL", "REDIS_URL"))}
    env.update({
        "DJANGO_SETTINGS_MODULE": "skald.settings",
        "SKALD_DEBUG": "0",
        "SKALD_SECRET_KEY_FILE": str(secret),
        "SKALD_ALLOWED_HOSTS": "skald.example.org",
        "DATABASE_URL": "postgres://skald@127.0.0.1:5432/skald",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "SKALD_AUDIT_KEY": "audit-hmac-key",
        "SKALD_METRICS_TOKEN": "metrics-token",
        "SKALD_FOUR_EYES": "1",
        "SKALD_VAR_DIR": str(tmp_path / "var"),
        **extra,
    })
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BASE / "manage.py"), *args], env=env, cwd=BASE,
                          capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_in_the_production_profile(tmp_path):
    # Without bubblewrap (a developer's machine) production must accept unconfined commands out loud.
    extra = {} if shutil.which("bwrap") else {"SKALD_EXEC_UNCONFINED_OK": "1"}
    result = manage(production_env(tmp_path, **extra), "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_fails_without_a_sandbox_unless_unconfined_commands_are_accepted(tmp_path):
    refused = manage(production_env(tmp_path, SKALD_EXEC_SANDBOX="off"), "check", "--deploy")
    accepted = manage(production_env(tmp_path, SKALD_EXEC_SANDBOX="off", SKALD_EXEC_UNCONFINED_OK="1"),
                      "check", "--deploy", "--fail-level", "WARNING")

    assert refused.returncode != 0 and "skald.E011" in refused.stderr and "sandbox: unavailable" in refused.stderr
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


def test_check_deploy_suggests_four_eyes_and_keeps_the_default(tmp_path):
    extra = {} if shutil.which("bwrap") else {"SKALD_EXEC_UNCONFINED_OK": "1"}
    result = manage(production_env(tmp_path, SKALD_FOUR_EYES="0", **extra), "check", "--deploy")
    assert result.returncode == 0, result.stdout + result.stderr  # a warning, not an error
    assert "skald.W009" in result.stderr and "SKALD_FOUR_EYES=1" in result.stderr


def test_check_deploy_names_a_missing_production_piece(tmp_path):
    env = production_env(tmp_path)
    env.pop("REDIS_URL")
    result = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0 and "skald.E003" in result.stderr


def test_a_partial_provider_profile_refuses_to_boot(tmp_path):
    result = manage(production_env(tmp_path, BRAIN_GDL_PROVIDER_BASE_URL="https://models.example.org/v1"), "check")
    assert result.returncode != 0 and "skald.E001" in result.stderr
    assert "models.example.org" not in result.stderr  # names variables, never values


def test_typed_helpers_fail_loudly_on_bad_values(tmp_path):
    with pytest.raises(ImproperlyConfigured):
        envbool("X", False, env={"X": "perhaps"})
    with pytest.raises(ImproperlyConfigured):
        envint("X", 1, env={"X": "ten"})
    with pytest.raises(ImproperlyConfigured):
        envint("X", 1, minimum=2, env={"X": "1"})
    secret = tmp_path / "s"
    secret.write_text("from-a-file\n")
    assert envstr("S", env={"S_FILE": str(secret)}) == "from-a-file"
    with pytest.raises(ImproperlyConfigured):
        envstr("S", env={"S": "a", "S_FILE": str(secret)})
    with pytest.raises(ImproperlyConfigured):
        envstr("S", env={"S_FILE": str(tmp_path / "missing")})
    assert envlist("L", env={"L": "a, b,,c"}) == ["a", "b", "c"]


def test_a_bad_setting_stops_the_process_with_its_name(tmp_path):
    result = manage(production_env(tmp_path, SKALD_Q_WORKERS="many"), "check")
    assert result.returncode != 0 and "SKALD_Q_WORKERS" in result.stderr


def test_a_server_database_with_debug_on_warns(tmp_path):
    env = production_env(tmp_path, SKALD_DEBUG="1")
    result = manage(env, "check")
    assert result.returncode == 0
    assert "skald.W003" in result.stderr


def test_importing_settings_creates_no_directory_and_writes_no_file(tmp_path):
    var_dir = tmp_path / "never-made"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKALD_", "DATABASE_URL"))}
    env["SKALD_VAR_DIR"] = str(var_dir)
    code = "import skald.settings as s; print(len(s.SECRET_KEY))"
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=BASE, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 50  # a throwaway key, not an empty one
    assert not var_dir.exists()


def test_manage_py_prepares_var_once_and_keeps_its_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKALD_", "DATABASE_URL"))}
    env["SKALD_VAR_DIR"] = str(tmp_path / "var")
    assert manage(env, "check").returncode == 0
    key = (tmp_path / "var" / "secret_key").read_text()
    assert manage(env, "check").returncode == 0
    assert (tmp_path / "var" / "secret_key").read_text() == key
    assert (tmp_path / "var" / "secret_key").stat().st_mode & 0o077 == 0


def test_turning_the_redirect_off_is_explained_until_the_proxy_is_said_to_redirect(tmp_path):
    unexplained = manage(production_env(tmp_path, SKALD_SSL_REDIRECT="0"), "check", "--deploy", "--fail-level",
                         "WARNING")
    assert unexplained.returncode != 0 and "skald.W005" in unexplained.stderr
    assert "SKALD_PROXY_REDIRECTS_HTTP=1" in unexplained.stderr and "X-Forwarded-Proto" in unexplained.stderr

    proxy_redirects = production_env(tmp_path, SKALD_SSL_REDIRECT="0", SKALD_PROXY_REDIRECTS_HTTP="1")
    behind_a_redirecting_proxy = manage(proxy_redirects, "check", "--deploy", "--fail-level", "WARNING")
    assert behind_a_redirecting_proxy.returncode == 0, behind_a_redirecting_proxy.stderr
    assert "no issues" in behind_a_redirecting_proxy.stdout


def test_a_redirect_without_a_trusted_scheme_header_is_named_as_a_loop(tmp_path):
    result = manage(production_env(tmp_path, SKALD_PROXY_SSL_HEADER=""), "check", "--deploy", "--fail-level",
                    "WARNING")
    assert result.returncode != 0 and "skald.W006" in result.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_it_warns_when_the_application_connects_as_a_superuser():
    from django.db import connection

    from skald.checks import check_database_role

    if connection.vendor != "postgresql":
        assert check_database_role(databases=["default"]) == []  # SQLite has no roles
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone()[0], "the test suite is expected to connect as a superuser"
    assert [w.id for w in check_database_role(databases=["default"])] == ["skald.W007"]
    with connection.cursor() as cursor:
        cursor.execute("DO $$ BEGIN CREATE ROLE skald_plain_app NOLOGIN; "
                       "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$")
        cursor.execute("SET ROLE skald_plain_app")
        try:
            assert check_database_role(databases=["default"]) == []
        finally:
            cursor.execute("RESET ROLE")


def test_an_invalid_compaction_setting_refuses_to_boot(tmp_path):
    result = manage(production_env(tmp_path, SKALD_COMPACTION='{"threshold_tokens": -1}'), "check")
    assert result.returncode != 0 and "skald.E005" in result.stderr and "threshold_tokens" in result.stderr
    assert manage(production_env(tmp_path, SKALD_COMPACTION='{"keep_tokens": 30000}'), "check").returncode == 0


@pytest.mark.parametrize(("command", "role", "pool_max"), [
    ("runserver", "web", 10), ("qcluster", "worker", 6), ("skald_qcluster", "worker", 6),
    ("skald_sweeper", "sweeper", 6)])
def test_each_process_names_its_role_on_its_connections_and_sizes_its_pool(tmp_path, command, role, pool_max):
    """`pg_stat_activity` tells the sweeper's connections from the web pool's (the load test counts
    the web role against SKALD_DB_POOL_MAX)."""
    probe = (f"import sys; sys.argv = ['manage.py', {command!r}]; import django; django.setup(); "
             "from django.conf import settings; o = settings.DATABASES['default']['OPTIONS']; "
             "print(settings.SKALD_ROLE, o['application_name'], o['pool']['max_size'])")
    result = subprocess.run([sys.executable, "-c", probe], env=production_env(tmp_path), cwd=BASE,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [role, f"skald-{role}", str(pool_max)]
