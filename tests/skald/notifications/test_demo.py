"""``make run``'s demo: the approver hears of a parked call by e-mail (the console backend in the
embedded profile), and the banner says where those messages appear."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core import mail

from approvals.rules.seed import default_rules_ensure
from loop.providers.loopback import text_turn, tool_turn
from skald.core.roles import roles_ensure
from skald.demo import DEMO_APPROVER_EMAIL, seed_demo
from skald.launcher import _banner
from skald.loop_adapters.discovery import forget_seen
from skald.notifications.models import Subscription
from skald.sessions.services import session_create, session_message_submit

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_the_demo_approver_gets_an_email_when_a_call_parks(settings, tmp_path, script):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path
    settings.SKALD_PUBLIC_URL = "http://127.0.0.1:8000"
    roles_ensure()  # a transactional test before this one flushed the groups the migration made
    forget_seen()  # the tools are offered anew, as in a fresh process
    default_rules_ensure()  # writes wait for an approver
    seed_demo(password="pw-demo")
    seed_demo(password=None)  # idempotent: still one subscription
    (subscription,) = Subscription.objects.all()
    assert subscription.owner.username == "approver" and subscription.channel == "user_email"

    operator = User.objects.get(username="operator")
    script(tool_turn(("write_file", {"path": "r.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=operator, session=session_create(user=operator, agent="troubleshooter"),
                           content="investigate")
    (message,) = mail.outbox
    assert message.to == [DEMO_APPROVER_EMAIL] and "An approval is waiting" in message.subject
    assert "http://127.0.0.1:8000/admin/approvals/pendingapproval/" in message.body
    assert message.alternatives[0][1] == "text/html"


def test_the_banner_says_where_the_emails_appear():
    assert "console e-mail backend" in _banner("http://127.0.0.1:8000", "logins: ...")
