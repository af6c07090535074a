from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_console_asks_anonymous_visitors_to_log_in(client):
    response = client.get("/console/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_console_serves_its_page_with_a_csrf_cookie(alice, client):
    client.force_login(alice)
    response = client.get("/console/")
    assert response.status_code == 200 and b"skald/console.js" in response.content
    assert "csrftoken" in response.cookies
    assert client.get("/static/skald/console.js").status_code == 200
