"""A crawler for the admin as one demo user sees it: log in like a browser, then follow every
same-site link reachable from the home (GET only, never a logout or a delete), up to a bound."""

from __future__ import annotations

import re
from collections import Counter, deque
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urldefrag, urlencode, urljoin, urlsplit

import httpx

from tests.e2e.stack import PASSWORD, Stack

MAX_PAGES = 600
# Links a person follows to leave or to destroy, not to read: never crawled.
SKIPPED = re.compile(r"/logout/|/delete/|/password/|_popup=|/export\.(csv|jsonl)|/static/|/ws/")
# Rows a worker consumes at any moment (the ORM broker's queue): a row gone between its list and its
# visit redirects to the list, which says so. Such a visit is left out, not counted as a broken page.
TRANSIENT = re.compile(r"^/admin/django_q/ormq/\d+/change/")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


PER_KIND = 3  # pages of one kind crawled (three audit events' pages, not all of them)


def signature(path: str, query: str) -> tuple[str, tuple[str, ...]]:
    """What makes a page a different kind of page: its path with the ids left out, and the names of
    its query's parameters. A changelist's filters combine into thousands of URLs showing the same
    page with other rows, and every row has its change page: a few of each kind (a filter, a sort,
    a page, a search, a row) are crawled, and no combination of two."""
    return re.sub(r"/\d+/", "/N/", path), tuple(sorted({name for name, _ in parse_qsl(query, keep_blank_values=True)}))


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


def crawl(client: httpx.Client, start: str = "/admin/", limit: int = MAX_PAGES, per_kind: int = PER_KIND
          ) -> tuple[dict[str, int], dict[str, str]]:
    """Breadth-first from ``start``: ``{path: status}`` for every page visited and
    ``{path: the page that linked it}``; ``per_kind`` pages of each kind (:func:`signature`)."""
    seen: dict[str, int] = {}
    parent: dict[str, str] = {start: ""}
    kinds: Counter[tuple[str, tuple[str, ...]]] = Counter()
    queue = deque([start])
    while queue and len(seen) < limit:
        path = queue.popleft()
        response = client.get(path)
        if TRANSIENT.match(path) and response.status_code == 302:
            continue
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
            # A change page's preserved filters lead back to the same page.
            query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
                               if k != "_changelist_filters"])
            local = parts.path + (f"?{query}" if query else "")
            kind = signature(parts.path, query)
            if not parts.path.startswith("/admin/") or SKIPPED.search(local) or local in parent:
                continue
            if kinds[kind] >= per_kind or len(kind[1]) > 1:
                continue
            kinds[kind] += 1
            parent[local] = path
            queue.append(local)
    return seen, parent
