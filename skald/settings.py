"""Skald settings: one module, every value from the environment through typed helpers.

Two profiles:
- embedded default (no configuration): SQLite under ``var/``, django-q2's ORM broker, an in-memory
  channel layer (the session-event log carries streams across processes), the deterministic provider;
- production: ``DATABASE_URL`` (PostgreSQL), ``REDIS_URL`` (channels-redis and the django-q2 broker),
  ``SKALD_SECRET_KEY``, ``SKALD_ALLOWED_HOSTS``, ``SKALD_DEBUG=0``.
Cross-setting rules are system checks in :mod:`skald.checks`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url

from skald.core.env import envbool, envint, envlist, envstr
from skald.core.var import embedded_secret_key, var_dir_path

BASE_DIR = Path(__file__).resolve().parent.parent
# Settings create no directory and write no file: manage.py, the launcher and the tests prepare var/.
VAR_DIR = var_dir_path(BASE_DIR)

DEBUG = envbool("SKALD_DEBUG", True)
SECRET_KEY = envstr("SKALD_SECRET_KEY") or embedded_secret_key(VAR_DIR)
ALLOWED_HOSTS = envlist("SKALD_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("SKALD_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework_simplejwt",
    "drf_spectacular",
    "django_filters",
    "channels",
    "django_q",
    "audit",
    "loop",
    "approvals",
    "proposals",
    "skald",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "skald.urls"
ASGI_APPLICATION = "skald.asgi.application"
WSGI_APPLICATION = "skald.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# --- database -------------------------------------------------------------------------------
DATABASE_URL = envstr("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": envstr("SKALD_SQLITE_PATH") or str(VAR_DIR / "skald.sqlite3"),
            "OPTIONS": {
                # IMMEDIATE takes the write lock at BEGIN: a read-then-write transaction (the audit
                # head, per-session sequences) can never fail half-way with "database is locked".
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # A file, not shared-cache memory: the kernel, its tool threads and the tests of a fresh
            # worker process need real SQLite locking, exactly as in production.
            "TEST": {"NAME": envstr("SKALD_TEST_SQLITE_NAME", str(VAR_DIR / f"test-{os.getpid()}.sqlite3"))},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channels, queue --------------------------------------------------------------------------
REDIS_URL = envstr("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

SKALD_TASK_TIMEOUT = envint("SKALD_Q_TIMEOUT", 900, minimum=30)
# A claim older than any task may run belongs to a worker that died: its turn is repaired (R3).
SKALD_CLAIM_STALE_SECONDS = SKALD_TASK_TIMEOUT + 60
# A claim is a lease its driver renews; once it lapses, the sweep or a wake-up recovers the turn (R2).
SKALD_LEASE_SECONDS = envint("SKALD_LEASE_SECONDS", 30, minimum=1)
# How often `manage.py skald_sweeper` (started by `make run`) hands out work nothing is doing.
SKALD_SWEEP_SECONDS = envint("SKALD_SWEEP_SECONDS", 5, minimum=1)
Q_CLUSTER: dict[str, object] = {
    "name": "skald",
    "workers": envint("SKALD_Q_WORKERS", 2, minimum=1),
    "timeout": SKALD_TASK_TIMEOUT,
    "retry": SKALD_TASK_TIMEOUT + 60,
    "max_attempts": 1,  # the kernel recovers explicitly; a blind retry could double-drive a turn
    "catch_up": False,
    "save_limit": 500,
    "poll": 0.2,
    "label": "Django Q2",
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"
SKALD_SYNC_TASKS = envbool("SKALD_SYNC_TASKS", False)  # tests run tasks inline

# --- auth and API -----------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework_simplejwt.authentication.JWTAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "skald.core.api.exceptions.exception_handler",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": None,
}
SIMPLE_JWT = {
    "ACCESS_TOKEN_LIFETIME": timedelta(minutes=envint("SKALD_JWT_ACCESS_MINUTES", 15, minimum=1)),
    "REFRESH_TOKEN_LIFETIME": timedelta(days=1),
    "AUTH_HEADER_TYPES": ("Bearer",),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Skald API",
    "DESCRIPTION": "Governed, durable LLM agent loops. Every error body is {code, message, extra}.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Several components share field names ("status", "decision") over different choice sets.
    "ENUM_NAME_OVERRIDES": {
        "GateActionEnum": ["allow", "require", "deny"],
        "ApprovalStatusEnum": "approvals.models.ApprovalStatus",
        "ProposalStatusEnum": "proposals.models.ProposalStatus",
        "RunStatusEnum": "skald.models.RunStatus",
        "CaseStatusEnum": "skald.models.CaseStatus",
        "ExchangeStatusEnum": "loop.models.ExchangeStatus",
        "ApprovalDecisionEnum": ["approve", "reject"],
        "HandoffDecisionEnum": ["continue", "close"],
    },
}

# --- i18n, static -----------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- security (production values unless DEBUG) ------------------------------------------------
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = envbool("SKALD_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SECURE_HSTS_SECONDS = envint("SKALD_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
# /healthz, /readyz and /metrics are probed over plain HTTP inside the cluster network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

# --- Skald ------------------------------------------------------------------------------------
SKALD_FOUR_EYES = envbool("SKALD_FOUR_EYES", False)
SKALD_AUDIT_KEY = envstr("SKALD_AUDIT_KEY")
SKALD_METRICS_TOKEN = envstr("SKALD_METRICS_TOKEN")
SKALD_DEMO_PASSWORD = envstr("SKALD_DEMO_PASSWORD")
SKALD_WORKSPACE_ROOT = Path(envstr("SKALD_WORKSPACE_ROOT", str(VAR_DIR / "workspaces")))
SKALD_GDL_WAIT_SECONDS = envint("SKALD_GDL_WAIT_SECONDS", 25, minimum=1)
BRAIN_ENGINE_EXEC_ALLOWLIST = envstr("BRAIN_ENGINE_EXEC_ALLOWLIST")
# The provider profile is parsed (and its status computed) by skald.provider_config at first use;
# a partial profile fails the skald.E001 system check, so `manage.py check` refuses to boot.
SKALD_PROVIDER_ENV = {k: v for k, v in os.environ.items() if k.startswith("BRAIN_GDL_PROVIDER_")}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("SKALD_LOG_LEVEL", "INFO")},
    "loggers": {"django_q": {"level": "WARNING"}},
}

# django-q2 keeps cluster stats in the cache; a shared cache lets /readyz see the workers.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    }

# Deployment-wide overrides of the loop bounds (SPEC L2), e.g. '{"max_turns": 12}'; agents override further.
try:
    SKALD_LOOP_BOUNDS: dict[str, object] = __import__("json").loads(envstr("SKALD_LOOP_BOUNDS", "{}"))
except ValueError as _exc:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"SKALD_LOOP_BOUNDS must be a JSON object: {_exc}") from None

# Deployment-wide compaction settings (SPEC L14), e.g. '{"threshold_tokens": 32000}'.
try:
    SKALD_COMPACTION: dict[str, object] = __import__("json").loads(envstr("SKALD_COMPACTION", "{}"))
except ValueError as _exc:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"SKALD_COMPACTION must be a JSON object: {_exc}") from None
