"""Generated corpora for the credential tripwires: format-valid fake credentials and benign lines.

Nothing secret is committed: every fake is a well-known prefix plus random characters drawn at
run time, so no file in the repository holds a string a push-protection scanner would flag.
``make bench`` uses the same corpora as the suite.
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
HEX = "0123456789abcdef"
UPPER_B32 = string.ascii_uppercase + "234567"


@dataclass(frozen=True)
class Fake:
    kind: str  # the kind the detector must name
    snippet: str  # the credential as it would be pasted: alone, or with the name it is assigned to


def _r(rng: random.Random, size: int, alphabet: str = ALNUM) -> str:
    # A digit and a letter in every value whose alphabet has both, as real keys have.
    mixed = any(c.isdigit() for c in alphabet) and any(c.isalpha() for c in alphabet)
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(size))
        if not mixed or size < 8 or (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return value


def _jwt(rng: random.Random) -> str:
    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    header = part({"alg": "HS256", "typ": "JWT"})
    payload = part({"sub": _r(rng, 12), "name": "alice", "iat": rng.randrange(1_600_000_000, 1_800_000_000)})
    return f"{header}.{payload}.{_r(rng, 43, ALNUM + '-_')}"


def _basic(rng: random.Random) -> str:
    return base64.b64encode(f"deploy:{_r(rng, 14)}".encode()).decode()


def _password(rng: random.Random) -> str:
    return _r(rng, 6) + rng.choice("!#%&*+") + _r(rng, 7) + str(rng.randrange(10, 99))


# (kind, maker). Prefixes are split ("gh" "p_") so the repository never holds a whole prefix+value.
_MAKERS: list[tuple[str, Callable[[random.Random], str]]] = [
    ("aws-access-token", lambda r: "AK" + "IA" + _r(r, 16, UPPER_B32)),
    ("github-pat", lambda r: "gh" + "p_" + _r(r, 36)),
    ("github-fine-grained-pat", lambda r: "github" + "_pat_" + _r(r, 82, ALNUM + "_")),
    ("gitlab-pat", lambda r: "gl" + "pat-" + _r(r, 20)),
    ("slack-bot-token", lambda r: "xo" + f"xb-{r.randrange(10**11, 10**12)}-{r.randrange(10**12, 10**13)}-"
     + _r(r, 24)),
    ("slack-webhook-url", lambda r: "https://hooks.slack.com/services/" + f"T{_r(r, 8, UPPER_B32)}/"
     f"B{_r(r, 8, UPPER_B32)}/{_r(r, 24)}"),
    ("stripe-access-token", lambda r: "sk" + "_live_" + _r(r, 24)),
    ("openai-api-key", lambda r: "sk-" + "proj-" + _r(r, 74, ALNUM + "_-") + "T3Blbk" + "FJ" + _r(r, 74, ALNUM + "_-")),
    ("anthropic-api-key", lambda r: "sk-ant-" + "api03-" + _r(r, 93, ALNUM + "_-") + "AA"),
    ("huggingface-access-token", lambda r: "hf" + "_" + _r(r, 34, string.ascii_letters) + ""),
    ("perplexity-api-key", lambda r: "pp" + "lx-" + _r(r, 48)),
    ("cohere-api-token", lambda r: "COHERE_API_KEY=" + _r(r, 40)),
    ("npm-access-token", lambda r: "np" + "m_" + _r(r, 36)),
    ("pypi-upload-token", lambda r: "pypi-" + "AgEIcHlwaS5vcmc" + _r(r, 70, ALNUM + "_-")),
    ("rubygems-api-token", lambda r: "rubygems" + "_" + _r(r, 48, HEX)),
    ("clojars-api-token", lambda r: "CLOJARS" + "_" + _r(r, 60, LOWER_ALNUM)),
    ("sendgrid-api-token", lambda r: "SG" + "." + _r(r, 22) + "." + _r(r, 43)),
    ("sendinblue-api-token", lambda r: "xkey" + "sib-" + _r(r, 64, HEX) + "-" + _r(r, 16)),
    ("mailgun-private-api-token", lambda r: "MAILGUN_API_KEY=" + "key" + "-" + _r(r, 32, HEX)),
    ("twilio-api-key", lambda r: "S" + "K" + _r(r, 32, HEX)),
    ("gcp-api-key", lambda r: "AI" + "za" + _r(r, 35, ALNUM + "_-")),
    ("digitalocean-pat", lambda r: "dop" + "_v1_" + _r(r, 64, HEX)),
    ("databricks-api-token", lambda r: "da" + "pi" + _r(r, 32, HEX)),
    ("pulumi-api-token", lambda r: "pu" + "l-" + _r(r, 40, HEX)),
    ("heroku-api-key-v2", lambda r: "HRKU" + "-AA" + _r(r, 58, ALNUM + "_-")),
    ("datadog-access-token", lambda r: "DATADOG_API_KEY=" + _r(r, 40, LOWER_ALNUM)),
    ("grafana-service-account-token", lambda r: "gl" + "sa_" + _r(r, 32) + "_" + _r(r, 8, HEX)),
    ("vault-service-token", lambda r: "hv" + "s." + _r(r, 100, ALNUM + "_-")),
    ("shopify-access-token", lambda r: "sh" + "pat_" + _r(r, 32, HEX)),
    ("square-access-token", lambda r: "sq0" + "atp-" + _r(r, 22, ALNUM + "_-")),
    ("linear-api-key", lambda r: "lin" + "_api_" + _r(r, 40)),
    ("doppler-api-token", lambda r: "dp." + "pt." + _r(r, 43)),
    ("postman-api-token", lambda r: "PM" + "AK-" + _r(r, 24, HEX) + "-" + _r(r, 34, HEX)),
    ("age-secret-key", lambda r: "AGE-SECRET" + "-KEY-1" + _r(r, 58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")),
    ("jwt", _jwt),
    ("private-key-block", lambda r: "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEow" + _r(r, 60) + "\n-----END"),
    ("url-password", lambda r: f"postgres://app:{_r(r, 18)}@db.internal:5432/orders"),
    ("url-password", lambda r: f"mongodb+srv://svc:{_r(r, 16)}@cluster0.{_r(r, 5, LOWER_ALNUM)}.mongodb.net/app"),
    ("url-password", lambda r: f"redis://:{_r(r, 20)}@cache:6379/0"),
    ("azure-storage-connection-string", lambda r: "DefaultEndpointsProtocol=https;AccountName=store"
     + _r(r, 4, LOWER_ALNUM) + ";AccountKey=" + base64.b64encode(r.randbytes(64)).decode()
     + ";EndpointSuffix=core.windows.net"),
    ("authorization-basic", lambda r: "Authorization: Basic " + _basic(r)),
    ("authorization-bearer", lambda r: "Authorization: Bearer " + _r(r, 40, ALNUM + "._-")),
    ("generic-secret", lambda r: "DB_PASSWORD=" + _password(r)),
    ("generic-secret", lambda r: "client_secret: " + _r(r, 32)),
]

PLACEMENTS: dict[str, Callable[[str], str]] = {
    "plain": lambda s: f"Can you check why the deploy fails? I am using {s}, it worked yesterday.",
    "quoted": lambda s: f'The runbook says to set "{s}" before the migration.',
    "json": lambda s: json.dumps({"event": "deploy", "config": s, "attempt": 3}),
    "log": lambda s: f"2026-11-30T12:00:01.123Z WARN deploy[4121]: upstream auth with {s} failed (401)",
}


def fakes(seed: int = 16) -> list[Fake]:
    """One fake of every kind in :data:`_MAKERS`, drawn from ``seed``."""
    rng = random.Random(seed)
    return [Fake(kind, make(rng)) for kind, make in _MAKERS]


def placed_fakes(seed: int = 16) -> list[tuple[str, Fake, str]]:
    """Every fake in every placement: ``(placement, fake, text)``."""
    return [(name, fake, place(fake.snippet)) for fake in fakes(seed) for name, place in PLACEMENTS.items()]


# --- benign operational text ----------------------------------------------------------------------

def _sha(rng: random.Random, size: int = 40) -> str:
    return "".join(rng.choice(HEX) for _ in range(size))


def _b64(rng: random.Random) -> str:
    payload = {"user": rng.choice(["alice", "bob", "carol"]), "items": rng.randrange(1, 99), "ok": True}
    return base64.b64encode(json.dumps(payload).encode()).decode()


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


_SERVICES = ["orders", "billing", "gateway", "auth", "search", "inventory", "notifier", "scheduler"]
_PATHS = ["/api/v1/orders", "/api/v2/users/me", "/healthz", "/metrics", "/api/v1/tokens/refresh", "/login",
          "/api/v1/keys", "/static/app.js", "/api/v1/secrets/rotate", "/oauth/authorize"]
_WORDS = ["retry", "timeout", "pool", "cache", "index", "token", "key", "secret", "password", "session",
          "credential", "auth", "access", "bearer", "basic", "api", "private", "signing", "refresh"]

_TEMPLATES: list[Callable[[random.Random], str]] = [
    # logs
    lambda r: f"2026-11-30T12:{r.randrange(60):02d}:{r.randrange(60):02d}.{r.randrange(1000):03d}Z INFO "
              f"{r.choice(_SERVICES)}[{r.randrange(1, 9999)}]: {r.choice(['GET', 'POST', 'PUT'])} "
              f"{r.choice(_PATHS)} status={r.choice([200, 201, 204, 401, 404, 500])} "
              f"duration_ms={r.randrange(1, 3000)} request_id={_uuid(r)}",
    lambda r: f"level=warn ts=2026-11-30T12:00:{r.randrange(60):02d}Z caller=client.go:{r.randrange(30, 400)} "
              f"msg=\"token refresh scheduled\" expires_in={r.randrange(60, 3600)}s trace_id={_sha(r, 32)} "
              f"span_id={_sha(r, 16)}",
    lambda r: f"traceparent: 00-{_sha(r, 32)}-{_sha(r, 16)}-01",
    lambda r: f"X-Request-Id: {_uuid(r)}",
    lambda r: f"{r.choice(_SERVICES)} | auth ok for user_id={r.randrange(1, 10**6)} session={_uuid(r)} "
              f"ip=10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(256)}",
    lambda r: f"WARNING: password for user alice expires in {r.randrange(1, 30)} days",
    lambda r: f"ERROR [{r.choice(_SERVICES)}] secret {r.choice(['db-credentials', 'tls-cert', 'api-keys'])} "
              f"not found in namespace {r.choice(['prod', 'staging'])}",
    lambda r: f"kubelet: Pulling image \"ghcr.io/acme/{r.choice(_SERVICES)}@sha256:{_sha(r, 64)}\"",
    lambda r: f"Successfully pulled image registry.acme.io/{r.choice(_SERVICES)}:{r.randrange(1, 9)}."
              f"{r.randrange(20)}.{r.randrange(20)} in {r.randrange(1, 900)}ms",
    lambda r: f"usage: prompt_tokens={r.randrange(10, 9000)} completion_tokens={r.randrange(1, 4000)} "
              f"total_tokens={r.randrange(10, 12000)}",
    lambda r: f"payload={_b64(r)} size={r.randrange(10, 999)}",
    lambda r: f"Connection to postgres://app@db.internal:5432/orders established in {r.randrange(1, 90)} ms",
    lambda r: f"GET https://api.example.com/v1/search?q={r.choice(_WORDS)}&page={r.randrange(1, 20)}"
              f"&per_page=50&sort=updated 200",
    lambda r: f"cache key=user:{r.randrange(1, 10**6)}:profile ttl={r.randrange(10, 3600)} hit={r.random() < 0.5}",
    # code
    lambda r: f"    {r.choice(['token', 'api_key', 'password', 'secret'])} = os.environ[\""
              f"{r.choice(['API_TOKEN', 'DB_PASSWORD', 'APP_SECRET', 'SERVICE_KEY'])}\"]",
    lambda r: f"    password = form.cleaned_data[\"password{r.choice(['', '1', '2'])}\"]",
    lambda r: "    token = request.headers.get(\"Authorization\", \"\").removeprefix(\"Bearer \")",
    lambda r: f"    secret_key = settings.SECRET_KEY  # line {r.randrange(1, 500)}",
    lambda r: f"const apiKey = process.env.{r.choice(['API_KEY', 'STRIPE_KEY', 'MAPS_KEY'])};",
    lambda r: f"func (c *Client) RefreshToken(ctx context.Context, id int{r.choice([32, 64])}) error {{",
    lambda r: f"    max_tokens: int = {r.choice([256, 1024, 4096, 8192])}",
    lambda r: f"    headers = {{\"Authorization\": f\"Bearer {{token}}\", \"X-Retry\": \"{r.randrange(5)}\"}}",
    lambda r: f"def rotate_{r.choice(_WORDS)}_{r.choice(['keys', 'tokens', 'secrets'])}(*, actor: Actor, "
              f"now: datetime) -> int:",
    lambda r: f"assert resp.status_code == {r.choice([200, 401, 403])}, resp.json()[\"code\"]",
    lambda r: f"SELECT id, created_at FROM sessions WHERE user_id = {r.randrange(1, 10**5)} AND expires_at > now();",
    lambda r: f"    password_hash = make_password(raw, salt=None, hasher=\"argon2\")  # {_sha(r, 8)}",
    lambda r: f"export API_KEY=\"${{API_KEY:-}}\"  # set by the {r.choice(_SERVICES)} pipeline",
    lambda r: f"      - name: {r.choice(['DB_PASSWORD', 'API_TOKEN'])}\n        valueFrom:\n          secretKeyRef:",
    lambda r: f"  password: ${{{{ secrets.{r.choice(['DB_PASSWORD', 'REGISTRY_TOKEN'])} }}}}",
    lambda r: f"    token_ttl_seconds = {r.randrange(60, 86400)}",
    # diffs and VCS
    lambda r: f"diff --git a/{r.choice(_SERVICES)}/auth.py b/{r.choice(_SERVICES)}/auth.py\nindex "
              f"{_sha(r, 7)}..{_sha(r, 7)} 100644",
    lambda r: f"-    timeout = {r.randrange(1, 60)}\n+    timeout = {r.randrange(1, 60)}  # seconds, per request",
    lambda r: f"commit {_sha(r)}\nAuthor: Alice Operator <alice@example.com>",
    lambda r: f"Merge pull request #{r.randrange(1, 9999)} from acme/fix-token-refresh ({_sha(r, 7)})",
    lambda r: f"{_sha(r, 7)} Rotate the signing key schedule; secrets now expire after {r.randrange(7, 90)} days",
    # markdown
    lambda r: f"## Rotating credentials\n\nRun `skald rotate --{r.choice(['keys', 'tokens'])}` and wait for "
              f"the {r.choice(_SERVICES)} pods to restart.",
    lambda r: f"| {r.choice(_WORDS)} | {r.randrange(1, 100)} ms | {r.choice(['ok', 'degraded'])} |",
    lambda r: f"- [ ] Set `DB_PASSWORD` in the vault (see [docs](https://docs.acme.io/{r.choice(_WORDS)}))",
    lambda r: "> Never paste an API key into the chat; use the secret store instead.",
    lambda r: f"See https://github.com/acme/{r.choice(_SERVICES)}/blob/{_sha(r)}/README.md#L{r.randrange(1, 300)}",
    lambda r: f"Use `Authorization: Bearer <token>` with a token from /api/v1/tokens (expires in "
              f"{r.randrange(1, 24)} h).",
    lambda r: f"The bearer of this ticket, {r.choice(['alice', 'bob'])}, may restart the {r.choice(_SERVICES)} pool.",
    lambda r: f"Basic tier includes {r.randrange(1, 50)} seats; see the pricing page.",
    lambda r: f"docker run -e DATABASE_URL=postgres://app:${{PGPASSWORD}}@db:5432/app acme/{r.choice(_SERVICES)}",
    lambda r: f"sha256:{_sha(r, 64)}  {r.choice(_SERVICES)}-{r.randrange(1, 9)}.{r.randrange(20)}.tar.gz",
    lambda r: f"checksum {_sha(r, 64)} verified for artifact {_uuid(r)}",
]


def benign_lines(seed: int = 16, count: int = 1200) -> list[str]:
    """``count`` ordinary operational lines (logs, code, diffs, markdown), drawn from ``seed``."""
    rng = random.Random(seed)
    return [rng.choice(_TEMPLATES)(rng) for _ in range(count)]


# --- hostile input ---------------------------------------------------------------------------------

SIZE = 64 * 1024


def _fill(unit: str) -> str:
    return (unit * (SIZE // len(unit) + 1))[:SIZE]


def pathological_inputs() -> dict[str, str]:
    """Texts built from every keyword and from the shapes that make backtracking engines work hardest."""
    from loop.tripwires import default_detector  # the keywords come from the rule set under test

    keywords = sorted({k for rule in default_detector().rules for k in rule.keywords})
    return {
        "every keyword, back to back": _fill("".join(keywords)),
        "every keyword, assigned a near-secret": _fill("".join(f"{k}= a1b2c3d4e5f6 " for k in keywords)),
        "curl words": _fill("curl "),
        "one template word": _fill("twitter"),
        "key assignments": _fill("api_key= a1b2c3d4e5f6 "),
        "a token that never ends": "eyJ" + "a" * (SIZE - 3),
        "jwt heads": _fill("eyJhbGciOi.eyJzdWIiOi."),
        "private key headers": _fill("-----BEGIN RSA PRIVATE KEY"),
        "url userinfo": _fill("postgres://u:p"),
        "basic words": _fill("Basic dXNlcjpw "),
    }
