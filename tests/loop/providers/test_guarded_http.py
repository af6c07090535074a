"""The outbound chokepoint for what Skald fetches itself (identity provider discovery, keys, token,
userinfo): the provider egress's SSRF rules, a pinned address, no redirects (real HTTP on loopback)."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loop.errors import ProviderError
from loop.providers.guarded_http import OutboundPolicy, guarded_request

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
            return
        body = json.dumps({"path": self.path, "host": self.headers["Host"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


class _Resolver:
    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)

    def resolve(self, host: str, port: int) -> list[str]:
        return self.answers


def test_a_loopback_server_is_reached_only_when_its_network_is_allowed(server: str) -> None:
    with pytest.raises(ProviderError) as refused:
        guarded_request("GET", f"{server}/.well-known/openid-configuration", policy=OutboundPolicy())
    assert refused.value.code == "provider_ssrf_refused"
    answer = guarded_request("GET", f"{server}/.well-known/openid-configuration",
                             policy=OutboundPolicy(allow_cidrs=LOOPBACK))
    assert answer.status_code == 200 and answer.json()["path"] == "/.well-known/openid-configuration"


def test_a_name_is_resolved_once_and_pinned_while_host_keeps_the_name(server: str) -> None:
    port = server.rsplit(":", 1)[1]
    policy = OutboundPolicy(allow_cidrs=LOOPBACK, resolver=_Resolver("127.0.0.1"))
    answer = guarded_request("GET", f"http://idp.localhost:{port}/keys", policy=policy)
    assert answer.json() == {"path": "/keys", "host": f"idp.localhost:{port}"}


def test_a_redirect_is_never_followed(server: str) -> None:
    with pytest.raises(ProviderError) as refused:
        guarded_request("GET", f"{server}/moved", policy=OutboundPolicy(allow_cidrs=LOOPBACK))
    assert refused.value.code == "provider_redirect_refused"


def test_plain_http_is_refused_anywhere_but_loopback() -> None:
    policy = OutboundPolicy(resolver=_Resolver("93.184.216.34"))
    with pytest.raises(ProviderError) as refused:
        guarded_request("GET", "http://idp.example.com/.well-known/openid-configuration", policy=policy)
    assert refused.value.code == "provider_url_invalid"


@pytest.mark.parametrize("url", [
    "https://user@idp.example.com/", "https://idp.example.com/keys?x=1", "ftp://idp.example.com/",
    "https://2130706433/", "https://169.254.169.254/latest/",
])
def test_disguised_or_forbidden_destinations_are_refused_before_any_connection(url: str) -> None:
    with pytest.raises(ProviderError) as refused:
        guarded_request("GET", url, policy=OutboundPolicy(resolver=_Resolver("93.184.216.34")))
    assert refused.value.code in ("provider_url_invalid", "provider_ssrf_refused")
