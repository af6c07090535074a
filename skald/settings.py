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
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url

from skald.core.env import envbool, envint, envlist, envstr
from skald.core.var import embedded_audit_key, embedded_secret_key, var_dir_path

BASE_DIR = Path(__file__).resolve().parent.parent
# Settings create no directory and write no file: manage.py, the launcher and the tests prepare var/.
VAR_DIR = var_dir_path(BASE_DIR)

DEBUG = envbool("SKALD_DEBUG", True)
SECRET_KEY = envstr("SKALD_SECRET_KEY") or embedded_secret_key(VAR_DIR)
ALLOWED_HOSTS = envlist("SKALD_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("SKALD_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    # daphne's app only makes `manage.py runserver` serve ASGI (websockets included); importing it
    # loads Twisted, autobahn and OpenSSL (about 0.4 s of CPU) in every process. The launcher and
    # production run daphne's own command line, which needs no app, so only runserver lists it.
    *(["daphne"] if sys.argv[1:2] == ["runserver"] else []),
    "skald.apps.SkaldAdminConfig",  # django.contrib.admin with Skald's site (name, role homes)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework_simplejwt",
    "rest_framework_simplejwt.token_blacklist",  # every refresh token is recorded, so revocation can blacklist it
    "axes",  # failed sign-in counters and lockouts (skald/identity, docs/identity.md)
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from the project: the docs work offline
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
    "skald.core.api.middleware.RequestGuardMiddleware",  # malformed input → JSON 4xx before anything else
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # a locked-out admin/console sign-in → the generic lockout page
    "skald.tracing.middleware.TraceContextMiddleware",  # a caller's traceparent parents the admission span
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
# Which process this is: the pool is sized per process. `manage.py skald_qcluster` (or django-q2's
# own `qcluster`) is a worker and `manage.py skald_sweeper` the sweeper (both background roles,
# sized by SKALD_DB_WORKER_POOL_MAX);
# other entry points (daphne, management commands) count as web.
_BACKGROUND_COMMANDS = {"skald_qcluster": "worker", "qcluster": "worker", "skald_sweeper": "sweeper"}
SKALD_ROLE = envstr("SKALD_ROLE") or _BACKGROUND_COMMANDS.get(sys.argv[1] if len(sys.argv) > 1 else "", "web")
# PostgreSQL connections come from a per-process psycopg pool (Django's built-in pool): server
# connections are bounded by SKALD_DB_POOL_MAX (web) / SKALD_DB_WORKER_POOL_MAX (each qcluster
# process), never by traffic. A request waits at most SKALD_DB_POOL_TIMEOUT seconds for a
# connection, then answers 503 db_pool_exhausted (skald.core.saturation). SKALD_DB_POOL=0 turns
# pooling off (e.g. behind pgbouncer in transaction mode); connections then close after each request.
SKALD_DB_POOL = envbool("SKALD_DB_POOL", True)
SKALD_DB_POOL_MIN = envint("SKALD_DB_POOL_MIN", 1, minimum=0)
SKALD_DB_POOL_MAX = envint(
    "SKALD_DB_POOL_MAX" if SKALD_ROLE == "web" else "SKALD_DB_WORKER_POOL_MAX",
    # A worker holds at most 2 + max_parallel_calls (default 4) at once: the turn, the stop
    # watcher and one per concurrently running tool.
    10 if SKALD_ROLE == "web" else 6, minimum=1,
)
SKALD_DB_POOL_TIMEOUT = envint("SKALD_DB_POOL_TIMEOUT", 5, minimum=1)
# Server-side parameter binding with prepared statements (psycopg): a turn's statements repeat, so
# PostgreSQL parses and plans each once per connection instead of once per call (about a fifth of
# a PostgreSQL turn, bench/README.md). Off by default without the pool: a transaction-mode
# pgbouncer cannot keep a connection's prepared statements.
SKALD_DB_PREPARE = envbool("SKALD_DB_PREPARE", SKALD_DB_POOL)
# Backpressure (skald.backpressure, skald.core.saturation): at most SKALD_HTTP_MAX_INFLIGHT HTTP
# requests run at once per web process (each holds at most one pooled connection); the others
# wait up to SKALD_HTTP_WAIT_SECONDS, then answer 503 server_busy with Retry-After. 0 = no gate.
SKALD_HTTP_MAX_INFLIGHT = envint("SKALD_HTTP_MAX_INFLIGHT", SKALD_DB_POOL_MAX if SKALD_DB_POOL else 0, minimum=0)
SKALD_HTTP_WAIT_SECONDS = envint("SKALD_HTTP_WAIT_SECONDS", SKALD_DB_POOL_TIMEOUT, minimum=1)
# A message is refused with 503 queue_saturated when SKALD_QUEUE_MAX_PENDING tasks already wait
# for a worker for longer than SKALD_QUEUE_WAIT_SECONDS (0 = no limit).
SKALD_QUEUE_MAX_PENDING = envint("SKALD_QUEUE_MAX_PENDING", 500, minimum=0)
SKALD_QUEUE_WAIT_SECONDS = envint("SKALD_QUEUE_WAIT_SECONDS", 5, minimum=0)
SKALD_RETRY_AFTER_SECONDS = envint("SKALD_RETRY_AFTER_SECONDS", 2, minimum=1)
if DATABASE_URL:
    # CONN_MAX_AGE must be 0 with the pool: a request's connection returns to the pool when the
    # request ends (Django's request_finished), in the thread that used it.
    # Health checks: with the pool, Django checks a connection on checkout (one empty round trip),
    # so an idle pooled connection that died with a database restart never fails a request.
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        _options = DATABASES["default"].setdefault("OPTIONS", {})
        _options["application_name"] = f"skald-{SKALD_ROLE}"
        if SKALD_DB_PREPARE:
            _options["server_side_binding"] = True
            _options["prepare_threshold"] = 2  # a statement's second run prepares it
        if SKALD_DB_POOL:
            _options["pool"] = {
                "min_size": min(SKALD_DB_POOL_MIN, SKALD_DB_POOL_MAX),
                "max_size": SKALD_DB_POOL_MAX,
                "timeout": SKALD_DB_POOL_TIMEOUT,
                "max_idle": 300,
            }
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
    # No service: worker → daphne wakes and live deltas travel as local datagrams (see the module).
    CHANNEL_LAYERS = {"default": {"BACKEND": "skald.core.channel_layer.LocalFanoutChannelLayer",
                                  "CONFIG": {"directory": str(VAR_DIR / "channels")}}}

SKALD_TASK_TIMEOUT = envint("SKALD_Q_TIMEOUT", 900, minimum=30)
# The demo playbook streams its answers word by word, this many ms apart (0: all at once).
SKALD_PLAYBOOK_WORD_PAUSE_MS = envint("SKALD_PLAYBOOK_WORD_PAUSE_MS", 20, minimum=0)
# A claim older than any task may run belongs to a worker that died: its turn is repaired (R3).
SKALD_CLAIM_STALE_SECONDS = SKALD_TASK_TIMEOUT + 60
# A claim is a lease its driver renews; once it lapses, the sweep or a wake-up recovers the turn (R2).
SKALD_LEASE_SECONDS = envint("SKALD_LEASE_SECONDS", 30, minimum=1)
# How often `manage.py skald_sweeper` (started by `make run`) hands out work nothing is doing.
SKALD_SWEEP_SECONDS = envint("SKALD_SWEEP_SECONDS", 5, minimum=1)
# Liveness is progress (issue 28): with work due, some worker must start a task within this many
# seconds, or readiness reports `workers: wedged` (503) and the supervisors restart the cluster.
SKALD_WORKERS_STALL_SECONDS = envint("SKALD_WORKERS_STALL_SECONDS", SKALD_SWEEP_SECONDS + 10, minimum=2)
Q_CLUSTER: dict[str, object] = {
    "name": "skald",
    "workers": envint("SKALD_Q_WORKERS", 2, minimum=1),
    "timeout": SKALD_TASK_TIMEOUT,
    "retry": SKALD_TASK_TIMEOUT + 60,
    "max_attempts": 1,  # the kernel recovers explicitly; a blind retry could double-drive a turn
    "catch_up": False,
    # django-q2's own record of a task that succeeded. Skald's records are the truth (the outbox row's
    # done_at, the exchange, the audit chain), and with a positive limit django-q2's monitor locks and
    # loads every stored success row to prune one, for each task (issue 34). Failures are always kept.
    # -1: no success rows (the default); 0: keep them all; N: keep the newest N.
    "save_limit": envint("SKALD_Q_SAVE_LIMIT", -1, minimum=-1),
    # django-q2 replaces a worker process after this many tasks (its default, 500); the scale bench
    # raises it to watch one worker's memory over 1,000 exchanges.
    "recycle": envint("SKALD_Q_RECYCLE", 500, minimum=1),
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

# --- single sign-on (docs/identity.md) ------------------------------------------------------------
# The identity provider profile: SKALD_OIDC_ISSUER, _CLIENT_ID, _CLIENT_SECRET (all or none; the
# skald.E010 check refuses a partial one) and optional _AUDIENCE, _GROUPS_CLAIM, _SCOPES,
# _PROVIDER_NAME, _TIMEOUT_SECONDS. Parsed by skald.identity.oidc_config at first use.
# Any secret may come from NAME_FILE (skald.core.env), e.g. SKALD_OIDC_CLIENT_SECRET_FILE.
SKALD_OIDC_ENV = {name: envstr(name) for name in {n.removesuffix("_FILE") for n in os.environ
                                                  if n.startswith("SKALD_OIDC_")}}
OIDC_AUTHENTICATE_CLASS = "skald.identity.oidc.SignInStart"
OIDC_CALLBACK_CLASS = "skald.identity.oidc.SignInCallback"
LOGIN_REDIRECT_URL = "/admin/"

# --- sign-in protection (django-axes; skald/identity, docs/identity.md) -------------------------
# Axes' standalone backend goes first: a locked-out account or address is refused before any
# password is checked, on every entrance that calls authenticate() (token endpoint, admin and
# console login). Counters live in the database (AccessAttempt), so they hold across processes and
# need no Redis. A lockout lasts until an admin lifts it (Admin → Axes → Access attempts → "Lift").
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    "skald.identity.oidc.ProviderBackend",  # answers only the provider's callback, and only when configured
]
# Two counters (skald/identity/lockout.py): an account from one address locks at
# SKALD_SIGNIN_FAILURE_LIMIT, the account from anywhere at SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT; an
# address alone is never locked (it would lock everyone behind the same NAT).
AXES_FAILURE_LIMIT = envint("SKALD_SIGNIN_FAILURE_LIMIT", 20, minimum=1)
SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT = envint("SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT", 100, minimum=1)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]
AXES_HANDLER = "skald.identity.lockout.PairThenAccountHandler"
AXES_COOLOFF_TIME = None
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "skald.identity.lockout.lockout_response"
AXES_VERBOSE = False
AXES_SENSITIVE_PARAMETERS = ["password", "refresh", "access"]
# The client address counted (and written in the sign-in audit rows): the socket's peer, or behind a
# proxy the address the trusted proxies appended to SKALD_CLIENT_IP_HEADER (docs/production.md).
SKALD_CLIENT_IP_HEADER = envstr("SKALD_CLIENT_IP_HEADER")
SKALD_TRUSTED_PROXY_COUNT = envint("SKALD_TRUSTED_PROXY_COUNT", 1, minimum=1)
AXES_CLIENT_IP_CALLABLE = "skald.identity.signins.client_ip"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # the identity provider's bearer tokens (JWKS), when SSO is configured; others pass through
        "skald.identity.bearer.ProviderBearerAuthentication",
        # simplejwt's JWTAuthentication, refusing access tokens issued before the user's revocation
        "skald.identity.tokens.RevocableJWTAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Request bodies are JSON only: a form or multipart body is a 415 with the error body, and the
    # schema declares application/json alone (generated clients then send JSON).
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # ?format=<unknown> is ignored, not a 404 (skald/core/api/negotiation.py).
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "skald.core.api.negotiation.IgnoreUnknownFormat",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_SCHEMA_CLASS": "skald.core.api.schema.SkaldAutoSchema",
    "EXCEPTION_HANDLER": "skald.core.api.exceptions.exception_handler",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": None,
}
# The request guard (skald/core/api/middleware.py, docs/api-limits.md): body limits by URL name
# (413 above them), the query-string limit (414) and the prefixes whose every error is JSON.
SKALD_API_PREFIXES = ("/api/", "/workflow/")
SKALD_MAX_QUERY_BYTES = envint("SKALD_MAX_QUERY_BYTES", 12 * 1024, minimum=1024)  # twisted cuts at 16 KiB
SKALD_BODY_LIMITS: dict[str, int] = {
    "default": 64 * 1024,  # resolves, decisions, notes (≤ 8,000 characters, JSON-escaped)
    "session-messages": 512 * 1024,  # a 64 KiB message, even written as \\uXXXX escapes
    "workflow-gdl": 64 * 1024,  # an 8 KiB ticket, escaped
    "cases": 64 * 1024,  # a case: title and description
    "token_obtain_pair": 8 * 1024,  # a username and a password
    "token_refresh": 8 * 1024,
    "policy-plan": 2 * 1024 * 1024,  # a policy document of up to 256 K characters, escaped
    "policy-apply": 2 * 1024 * 1024,
}
SIMPLE_JWT = {
    "ACCESS_TOKEN_LIFETIME": timedelta(minutes=envint("SKALD_JWT_ACCESS_MINUTES", 15, minimum=1)),
    "REFRESH_TOKEN_LIFETIME": timedelta(days=1),
    "AUTH_HEADER_TYPES": ("Bearer",),
}
SPECTACULAR_DESCRIPTION = """Governed, durable LLM agent loops.

**How to authenticate.** `POST /api/auth/token/` with `{"username", "password"}` as JSON returns an
`access` and a `refresh` token. Send `Authorization: Bearer <access>` on every call; when the access
token expires (401 `token_not_valid`), `POST /api/auth/token/refresh/` with `{"refresh"}` for a new
one. In Swagger UI, press *Authorize* and paste the access token. What a caller may do follows its
roles (operator, approver, reviewer, auditor, workflow). After 20 failed sign-ins for an account or
from an address, `/api/auth/token/` answers 429 `sign_in_locked` until an administrator lifts the
lock; `POST /api/auth/sign-out/` revokes every token of the caller. With single sign-on configured,
access tokens issued by the identity provider are accepted too (`providerBearer`).

**Conventions.** Request and response bodies are JSON (`application/json`; any other request
content type is a 415). Every error body is `{"code", "message", "extra"}` with a stable `code`;
each operation lists its codes per status. See `docs/calling-skald.md` in the repository.
"""

from skald.notifications.schema import EVENT_TYPES as NOTIFICATION_EVENT_TYPES  # noqa: E402  (pure data)
from skald.notifications.schema import notification_components  # noqa: E402  (pure data)
from skald.tools.delegation_schemas import openapi_components  # noqa: E402  (pure data)

SPECTACULAR_SETTINGS = {
    # The argument schemas of the delegation tools models are prompted with (docs/delegation.md),
    # copies with their enums named (the tools validate with the originals).
    "APPEND_COMPONENTS": {"schemas": {**openapi_components(), **notification_components()}},
    "TITLE": "Skald API",
    "DESCRIPTION": SPECTACULAR_DESCRIPTION,
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Request bodies are closed (additionalProperties: false) and the server refuses unknown keys;
    # request strings hold no NUL, which the request guard refuses everywhere.
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "skald.core.api.strict_input.closed_request_bodies",
                             "skald.core.api.strict_input.nul_free_strings",
                             "skald.core.api.strict_input.json_query_parameters",
                             "skald.core.api.schema.jwt_first"],
    "SWAGGER_UI_DIST": "SIDECAR",
    # No call to the public validator service: the docs page loads nothing from outside the project.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None, "persistAuthorization": True},
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "TAGS": [
        {"name": "auth", "description": "JWT obtain and refresh, sign-out (revokes every token of the caller)."},
        {"name": "sessions", "description": "Conversations with an agent: messages, exchanges, events."},
        {"name": "cases", "description": "Cases that GDL runs troubleshoot."},
        {"name": "runs", "description": "GDL runs: launch, follow, stop, human seams, replay-verify."},
        {"name": "approvals", "description": "Pending approvals, rule explain, the gateable tools."},
        {"name": "proposals", "description": "The review queue: proposals and their disposal."},
        {"name": "audit", "description": "The hash-chained audit log."},
        {"name": "inspect", "description": "The assembled services of an agent, for operators and auditors."},
        {"name": "tasks", "description": "A source's async tasks: running ones and recent failures."},
        {"name": "policy", "description": "The governance configuration (admins only): approval rules and "
                                          "security groups with ETag / If-Match, the policy document's plan "
                                          "and apply."},
        {"name": "mcp", "description": "MCP servers (admins only): registration validated at save, their tools "
                                       "with pinned definitions and quarantines."},
        {"name": "notifications", "description": "Subscriptions to events (own ones; admins all). Webhook bodies "
                                                 "are the NotificationPayload component (docs/notifications.md)."},
    ],
    # Several components share field names ("status", "decision") over different choice sets.
    "ENUM_NAME_OVERRIDES": {
        "GateActionEnum": ["allow", "require", "deny"],
        "ApprovalStatusEnum": "approvals.models.ApprovalStatus",
        "ProposalStatusEnum": "proposals.models.ProposalStatus",
        "RunStatusEnum": "skald.models.RunStatus",
        "CaseStatusEnum": "skald.models.CaseStatus",
        "ExchangeStatusEnum": "loop.models.ExchangeStatus",
        "ApproveDecisionEnum": ["approve"],
        "RejectDecisionEnum": ["reject"],
        "HandoffDecisionEnum": ["continue", "close"],
        "NotificationEventEnum": list(NOTIFICATION_EVENT_TYPES),
        "NotificationRiskEnum": ["low", "medium", "high"],
    },
}

# --- i18n, static -----------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
FORMAT_MODULE_PATH = ["skald.formats"]  # one date format everywhere: 24-hour, UTC, seconds
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
# Behind a TLS-terminating proxy (docs/production.md): the proxy must *overwrite* this header with
# the client's scheme ("https"); Django then treats the request as secure. "" trusts no header.
SKALD_PROXY_SSL_HEADER = envstr("SKALD_PROXY_SSL_HEADER", "X-Forwarded-Proto")
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_" + SKALD_PROXY_SSL_HEADER.upper().replace("-", "_"), "https") if SKALD_PROXY_SSL_HEADER else None
)
USE_X_FORWARDED_HOST = envbool("SKALD_USE_X_FORWARDED_HOST", False)
# Django redirects plain HTTP to HTTPS. Turn it off only where the proxy itself redirects (and
# then say so with SKALD_PROXY_REDIRECTS_HTTP=1: check skald.W005 explains, security.W008 is
# silenced because the redirect exists, in the proxy).
SECURE_SSL_REDIRECT = envbool("SKALD_SSL_REDIRECT", not DEBUG)
SKALD_PROXY_REDIRECTS_HTTP = envbool("SKALD_PROXY_REDIRECTS_HTTP", False)
SILENCED_SYSTEM_CHECKS = ["security.W008"] if SKALD_PROXY_REDIRECTS_HTTP and not SECURE_SSL_REDIRECT else []
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
# Signs recorded chain heads (HMAC-SHA256). The embedded profile generates one under var/;
# production names it (skald.W002 warns when it is missing). docs/audit-heads.md.
SKALD_AUDIT_KEY = envstr("SKALD_AUDIT_KEY") or (embedded_audit_key(VAR_DIR) if DEBUG else "")
# Where the latest signed head is exported (besides the ``skald.audit.chain_head`` log line); the
# launcher defaults it to var/chain_head.json. Keep it where the database's writers cannot write.
SKALD_CHAIN_HEAD_FILE = envstr("SKALD_CHAIN_HEAD_FILE")
SKALD_METRICS_TOKEN = envstr("SKALD_METRICS_TOKEN")
SKALD_DEMO_PASSWORD = envstr("SKALD_DEMO_PASSWORD")
SKALD_WORKSPACE_ROOT = Path(envstr("SKALD_WORKSPACE_ROOT", str(VAR_DIR / "workspaces")))
SKALD_GDL_WAIT_SECONDS = envint("SKALD_GDL_WAIT_SECONDS", 25, minimum=1)
BRAIN_ENGINE_EXEC_ALLOWLIST = envstr("BRAIN_ENGINE_EXEC_ALLOWLIST")
# The exec sandbox (docs/production.md, "Sandbox"): `auto` confines execute_cmd with bubblewrap when
# it works on this machine, `off` never does. Without one, commands run unconfined only where
# SKALD_EXEC_UNCONFINED_OK holds: by default in the embedded profile (SKALD_DEBUG on), never in
# production unless said explicitly; `check --deploy` fails otherwise (skald.E011).
SKALD_EXEC_SANDBOX = envstr("SKALD_EXEC_SANDBOX", "auto")
SKALD_EXEC_UNCONFINED_OK = envbool("SKALD_EXEC_UNCONFINED_OK", DEBUG)
SKALD_EXEC_NETWORK = envbool("SKALD_EXEC_NETWORK", False)
SKALD_EXEC_UID = envint("SKALD_EXEC_UID", 65534, minimum=1)  # never root
SKALD_EXEC_CPU_SECONDS = envint("SKALD_EXEC_CPU_SECONDS", 60, minimum=0)  # 0: no limit
SKALD_EXEC_MEMORY_MB = envint("SKALD_EXEC_MEMORY_MB", 1024, minimum=0)
SKALD_EXEC_FILE_MB = envint("SKALD_EXEC_FILE_MB", 64, minimum=0)
SKALD_EXEC_OPEN_FILES = envint("SKALD_EXEC_OPEN_FILES", 256, minimum=0)
SKALD_EXEC_PROCESSES = envint("SKALD_EXEC_PROCESSES", 64, minimum=0)
# MCP servers (docs/mcp.md). stdio servers start only programs named here (argv[0], exactly; empty:
# none); Streamable HTTP servers pass the providers' SSRF screen, with these CIDRs admitted (e.g.
# 127.0.0.0/8 for a server on the same machine). A pooled session idle this long is closed.
SKALD_MCP_STDIO_ALLOWLIST = tuple(envlist("SKALD_MCP_STDIO_ALLOWLIST"))
SKALD_MCP_ALLOW_CIDRS = envstr("SKALD_MCP_ALLOW_CIDRS")
SKALD_MCP_IDLE_SECONDS = envint("SKALD_MCP_IDLE_SECONDS", 300, minimum=1)
SKALD_MCP_CALL_TIMEOUT_SECONDS = envint("SKALD_MCP_CALL_TIMEOUT_SECONDS", 60, minimum=1)
# An MCP server's elicitation card unanswered this long is declined (docs/mcp.md, "Elicitation").
SKALD_MCP_ELICITATION_TIMEOUT_SECONDS = envint("SKALD_MCP_ELICITATION_TIMEOUT_SECONDS", 300, minimum=0)
# stdio MCP servers start in the exec sandbox (bubblewrap) when it works here: auto | off.
SKALD_MCP_STDIO_SANDBOX = envstr("SKALD_MCP_STDIO_SANDBOX", "auto")
# Notifications (docs/notifications.md). Deep links are absolute: SKALD_PUBLIC_URL is the address
# people open Skald at. Webhook and chat receivers pass the providers' SSRF screen; private or
# loopback receivers need their range here. A message is retried with exponential backoff and
# jitter up to SKALD_NOTIFY_MAX_ATTEMPTS sends, then it is a dead letter (retryable in the admin).
SKALD_PUBLIC_URL = envstr("SKALD_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
SKALD_NOTIFY_ALLOW_CIDRS = envstr("SKALD_NOTIFY_ALLOW_CIDRS")
SKALD_NOTIFY_MAX_ATTEMPTS = envint("SKALD_NOTIFY_MAX_ATTEMPTS", 8, minimum=1)
SKALD_NOTIFY_RETRY_BASE_SECONDS = envint("SKALD_NOTIFY_RETRY_BASE_SECONDS", 30, minimum=1)
SKALD_NOTIFY_RETRY_CAP_SECONDS = envint("SKALD_NOTIFY_RETRY_CAP_SECONDS", 3600, minimum=1)
SKALD_NOTIFY_TIMEOUT_SECONDS = envint("SKALD_NOTIFY_TIMEOUT_SECONDS", 10, minimum=1)
# The first attempt from the committing process itself (skald/notifications/fastpath.py); off: only
# the queued task and the sweep send.
SKALD_NOTIFY_SEND_AT_COMMIT = envbool("SKALD_NOTIFY_SEND_AT_COMMIT", True)
SKALD_NOTIFY_EXPIRY_WARNING_MINUTES = envint("SKALD_NOTIFY_EXPIRY_WARNING_MINUTES", 60, minimum=1)
SKALD_NOTIFY_RUN_STUCK_MINUTES = envint("SKALD_NOTIFY_RUN_STUCK_MINUTES", 30, minimum=1)
SKALD_NOTIFY_SECRET_GRACE_HOURS = envint("SKALD_NOTIFY_SECRET_GRACE_HOURS", 24, minimum=0)
# E-mail: SMTP when SKALD_EMAIL_HOST is set, else the console backend (messages on the server's output).
SKALD_EMAIL_HOST = envstr("SKALD_EMAIL_HOST")
EMAIL_BACKEND = ("django.core.mail.backends.smtp.EmailBackend" if SKALD_EMAIL_HOST
                 else "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = SKALD_EMAIL_HOST or "localhost"
EMAIL_PORT = envint("SKALD_EMAIL_PORT", 587, minimum=1)
EMAIL_HOST_USER = envstr("SKALD_EMAIL_USER")
EMAIL_HOST_PASSWORD = envstr("SKALD_EMAIL_PASSWORD")  # or SKALD_EMAIL_PASSWORD_FILE
EMAIL_USE_TLS = envbool("SKALD_EMAIL_TLS", True)
EMAIL_TIMEOUT = envint("SKALD_EMAIL_TIMEOUT_SECONDS", 10, minimum=1)
DEFAULT_FROM_EMAIL = envstr("SKALD_EMAIL_FROM", "skald@localhost")
# The provider profile is parsed (and its status computed) by skald.provider_config at first use;
# a partial profile fails the skald.E001 system check, so `manage.py check` refuses to boot.
SKALD_PROVIDER_ENV = {k: v for k, v in os.environ.items() if k.startswith("BRAIN_GDL_PROVIDER_")}

def _tracing_on() -> bool:
    from skald.tracing import endpoint_configured  # reads only the environment

    return endpoint_configured()


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # With tracing on (docs/observability.md) every record carries its span (skald.tracing.logs).
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s" + (
        " trace_id=%(trace_id)s span_id=%(span_id)s" if _tracing_on() else "")}},
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
