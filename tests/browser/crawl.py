"""A crawler for the admin as one demo user sees it: log in like a browser, then follow every
same-site link reachable from the home (GET only, never a logout or a delete), up to a bound."""

from __future__ import annotations

import re
from collections import deque
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx

from tests.e2e.stack import PASSWORD, Stack

MAX_PAGES = 300
# Links a person follows to leave or to destroy, not to read: never crawled.
SKIPPED = re.compile(r"/logout/|/delete/|/password/|_popup=|/export\.(csv|jsonl)|/static/|/ws/")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def admin_client(stack: Stack, username: str) -> httpx.Client:
    """A cookie session logged in through the admin's login form (CSRF and all)."""
    client = httpx.Client(base_url=stack.base_url, timeout=15.0)
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, "no CSRF token on the login page"
    done = client.post("/admin/login/?next=/admin/", data={"csrfmiddlewaretoken": token.group(1),
                                                           "username": username, "password": PASSWORD,
                                                           "next": "/admin/"})
    assert done.status_code == 302 and done.headers["location"] == "/admin/", f"{username} could not log in"
    return client


def crawl(client: httpx.Client, start: str = "/admin/", limit: int = MAX_PAGES
          ) -> tuple[dict[str, int], dict[str, str]]:
    """Breadth-first from ``start``: ``{path: status}`` for every page visited and
    ``{path: the page that linked it}``."""
    seen: dict[str, int] = {}
    parent: dict[str, str] = {start: ""}
    queue = deque([start])
    while queue and len(seen) < limit:
        path = queue.popleft()
        response = client.get(path)
        seen[path] = response.status_code
        if response.status_code != 200 or "text/html" not in response.headers.get("content-type", ""):
            continue
        parser = _Links()
        parser.feed(response.text)
        for href in parser.links:
            target = urldefrag(urljoin(path, href))[0]
            parts = urlsplit(target)
            if parts.netloc and parts.netloc != urlsplit(str(client.base_url)).netloc:
                continue
            local = parts.path + (f"?{parts.query}" if parts.query else "")
            if not parts.path.startswith("/admin/") or SKIPPED.search(local) or local in parent:
                continue
            parent[local] = path
            queue.append(local)
    return seen, parent
