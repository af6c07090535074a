"""A real OpenID Connect provider for the tests, served over loopback in a thread.

Built with authlib's Flask authorization server (authorization code grant with PKCE required, the
OpenID Connect extension for ID tokens, RFC 9068 JWT access tokens) and joserfc keys: discovery,
JWKS, authorize (a one-field sign-in form: who signs in), token and userinfo endpoints. Each
person's provider groups can change between sign-ins (``provider.people[name]["groups"]``).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from flask import Flask, jsonify, request
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from werkzeug.serving import make_server

CLIENT_ID = "skald"
CLIENT_SECRET = "skald-client-secret"


@dataclass
class Person:
    username: str
    sub: str
    groups: list[str] = field(default_factory=list)

    def get_user_id(self) -> str:
        return self.sub


@dataclass
class Client:
    redirect_uris: list[str]
    client_id: str = CLIENT_ID
    client_secret: str = CLIENT_SECRET
    id_token_signed_response_alg: str = "RS256"

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s in {"openid", "email", "profile", "groups"})

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in {"client_secret_post", "client_secret_basic"} if endpoint == "token" else True

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    person: Person
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class Provider:
    """``Provider().start()`` → serving at ``.issuer`` until ``.stop()``."""

    def __init__(self, redirect_uris: list[str] | None = None) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(4), "use": "sig", "alg": "RS256"},
                                       private=True)
        self.people: dict[str, Person] = {}
        self.client = Client(redirect_uris=list(redirect_uris or []))
        self.codes: dict[str, Code] = {}
        self.app = Flask(__name__)
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True)
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        self._thread: threading.Thread | None = None
        self._build()

    # -- people and keys

    def person(self, username: str, *groups: str) -> Person:
        self.people[username] = Person(username=username, sub=f"sub-{username}-{secrets.token_hex(3)}",
                                       groups=list(groups))
        return self.people[username]

    def jwks(self) -> dict[str, Any]:
        return KeySet([self.key]).as_dict(private=False)

    def userinfo_for(self, person: Person) -> dict[str, Any]:
        return {"sub": person.sub, "preferred_username": person.username, "email": f"{person.username}@idp.test",
                "groups": list(person.groups)}

    # -- the app

    def _build(self) -> None:
        provider = self
        server = AuthorizationServer(self.app, query_client=lambda cid: self.client if cid == CLIENT_ID else None,
                                     save_token=lambda token, req: None)

        class AccessTokens(JWTBearerTokenGenerator):
            def get_jwks(self) -> Any:
                return KeySet([provider.key])

            def get_extra_claims(self, client: Any, grant_type: str, user: Person, scope: str) -> dict[str, Any]:
                return {"groups": list(user.groups), "preferred_username": user.username}

        server.register_token_generator("default", AccessTokens(issuer=self.issuer))

        class CodeGrant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

            def save_authorization_code(self, code: str, req: Any) -> None:
                provider.codes[code] = Code(
                    code=code, client_id=req.client.client_id, redirect_uri=req.payload.redirect_uri,
                    scope=req.payload.scope, person=req.user, nonce=req.payload.data.get("nonce"),
                    code_challenge=req.payload.data.get("code_challenge"),
                    code_challenge_method=req.payload.data.get("code_challenge_method"))

            def query_authorization_code(self, code: str, client: Any) -> Code | None:
                found = provider.codes.get(code)
                return found if found and found.client_id == client.client_id else None

            def delete_authorization_code(self, authorization_code: Code) -> None:
                provider.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code: Code) -> Person:
                return authorization_code.person

        class IdTokens(OpenIDCode):
            def resolve_client_private_key(self, client: Any) -> Any:
                return provider.key

            def get_encode_header(self, client: Any) -> dict[str, str]:
                return {"alg": "RS256", "kid": str(provider.key.kid)}

            def get_client_claims(self, client: Any) -> dict[str, Any]:
                return {"iss": provider.issuer, "aud": [client.get_client_id()]}

            def exists_nonce(self, nonce: str, req: Any) -> bool:
                return any(code.nonce == nonce for code in provider.codes.values())

            def generate_user_info(self, user: Person, scope: str) -> UserInfo:
                return UserInfo(provider.userinfo_for(user))

        server.register_grant(CodeGrant, [CodeChallenge(required=True), IdTokens(require_nonce=True)])

        @self.app.get("/.well-known/openid-configuration")
        def discovery() -> Any:
            return jsonify({
                "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token", "userinfo_endpoint": f"{self.issuer}/userinfo",
                "jwks_uri": f"{self.issuer}/jwks", "response_types_supported": ["code"],
                "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"],
                "code_challenge_methods_supported": ["S256"], "scopes_supported": ["openid", "email", "profile"],
            })

        @self.app.get("/jwks")
        def jwks() -> Any:
            return jsonify(self.jwks())

        @self.app.route("/authorize", methods=["GET", "POST"])
        def authorize() -> Any:
            if request.method == "GET":
                server.get_consent_grant(end_user=None)  # validates client, redirect URI, PKCE, scope
                return ("<!doctype html><title>Test IdP</title><form method=post>"
                        "<label>User <input id=idp-username name=username></label>"
                        "<button id=idp-sign-in type=submit>Sign in</button></form>")
            person = self.people.get(request.form.get("username", ""))
            grant = server.get_consent_grant(end_user=person)
            return server.create_authorization_response(grant=grant, grant_user=person)

        @self.app.post("/token")
        def token() -> Any:
            return server.create_token_response()

        @self.app.get("/userinfo")
        def userinfo() -> Any:
            header = request.headers.get("Authorization", "")
            try:
                claims = jwt.decode(header.removeprefix("Bearer "), KeySet([self.key])).claims
            except Exception:
                return jsonify({"error": "invalid_token"}), 401
            person = next((p for p in self.people.values() if p.sub == claims.get("sub")), None)
            if person is None:
                return jsonify({"error": "invalid_token"}), 401
            return jsonify(self.userinfo_for(person))

    # -- lifecycle

    def start(self) -> Provider:
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="test-idp", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        if self._thread is not None:
            self._thread.join()
