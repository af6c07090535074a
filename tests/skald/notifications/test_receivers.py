"""Where messages may go (the SSRF screen), secret rotation, chat bodies and e-mail over real SMTP."""

from __future__ import annotations

import email
import json
import socket
from email.message import Message

import pytest
from aiosmtpd.controller import Controller
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.core.errors import SkaldError
from skald.notifications.models import Delivery, DeliveryStatus
from skald.notifications.outbound import NotifyConfigError
from skald.notifications.send import signed_headers
from skald.notifications.services import notification_record, subscription_create, subscription_rotate_secret
from tests.notify_receiver import webhook_receiver

pytestmark = pytest.mark.django_db(transaction=True)
ROBOT = Actor.system("test")


def webhook(url: str, **more):
    return subscription_create(actor=ROBOT, owner=None, data={
        "name": "hook", "channel": "webhook", "target": url, "events": ["approval.pending"], **more})


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hooks", "https://10.1.2.3/hooks", "https://169.254.169.254/x",
                                 "https://[::1]:8443/hooks"])
def test_a_private_range_receiver_is_refused_without_its_cidr(settings, url):
    settings.SKALD_NOTIFY_ALLOW_CIDRS = ""
    with pytest.raises(SkaldError) as refused:
        webhook(url)
    assert refused.value.code == "notify_ssrf_refused" and url not in refused.value.message
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8,10.0.0.0/8"
    if url.startswith(("http://127.", "https://10.")):
        assert webhook(url).pk  # admitted by its CIDR


def test_an_allow_cidrs_setting_that_does_not_parse_refuses_the_save(settings):
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8,nonsense"
    with pytest.raises(NotifyConfigError) as refused:
        webhook("http://127.0.0.1:9/hooks")
    assert refused.value.code == "notify_allow_cidrs_invalid" and "entry 2" in refused.value.message


def test_a_receiver_whose_range_is_withdrawn_after_saving_is_not_sent_to(settings, event):
    settings.SKALD_SYNC_TASKS = True
    with webhook_receiver() as receiver:
        settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"
        webhook(receiver.url)
        settings.SKALD_NOTIFY_ALLOW_CIDRS = ""  # screened again at every send
        notification_record(event=event())
    delivery = Delivery.objects.get()
    assert receiver.received == [] and delivery.status == DeliveryStatus.FAILING
    assert delivery.last_error.startswith("provider_ssrf_refused")


def test_a_rotated_secret_signs_beside_the_old_one_for_the_grace_period(settings):
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"
    subscription = webhook("http://127.0.0.1:9/hooks")
    old = subscription.secret
    subscription_rotate_secret(actor=ROBOT, subscription=subscription)
    assert subscription.secret != old and subscription.secret.startswith("whsec_")
    body = b'{"type":"approval.pending"}'
    headers = signed_headers(subscription, "msg_1", body)
    Webhook(subscription.secret).verify(body, headers)
    Webhook(old).verify(body, headers)  # receivers switch without a gap
    settings.SKALD_NOTIFY_SECRET_GRACE_HOURS = 0
    subscription_rotate_secret(actor=ROBOT, subscription=subscription)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, signed_headers(subscription, "msg_2", body))
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_SECRET_ROTATED).count() == 2


def test_chat_receivers_get_what_is_asked_by_whom_the_risk_and_the_link(settings, event):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"
    with webhook_receiver() as slack, webhook_receiver() as teams:
        for channel, receiver in (("slack", slack), ("teams", teams)):
            subscription_create(actor=ROBOT, owner=None, data={
                "name": channel, "channel": channel, "target": receiver.url, "events": ["approval.pending"]})
        notification_record(event=event())
    (message,) = slack.accepted()
    text = json.dumps(message.payload)
    assert "write_file asks for approval" in message.payload["text"]
    assert "alice" in text and "medium" in text and "/admin/x/1/change/" in text
    (card,) = teams.accepted()
    facts = {fact["name"]: fact["value"] for fact in card.payload["sections"][0]["facts"]}
    assert facts["What"] == "write_file asks for approval" and facts["Requested by"] == "alice"
    assert facts["Risk"] == "medium"
    assert card.payload["potentialAction"][0]["targets"][0]["uri"].endswith("/admin/x/1/change/")


def test_a_chat_workflow_url_that_carries_its_signature_in_the_query_is_accepted_and_kept(settings, event):
    """Teams' Workflows (Power Automate) URLs sign themselves in the query string: the screen admits a
    query for a notification receiver (never a fragment), and the query reaches the receiver as is."""
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"
    query = "api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=Zq8Rt2Lm4Nv6Bx1Cw3Ke5Jh7Fg9Dp0Sa2"
    with webhook_receiver() as teams:
        subscription_create(actor=ROBOT, owner=None, data={
            "name": "teams workflow", "channel": "teams", "target": f"{teams.url}/workflows/7/invoke?{query}",
            "events": ["approval.pending"]})
        notification_record(event=event())
    (card,) = teams.accepted()
    assert card.path == f"/hooks/workflows/7/invoke?{query}"
    for bad in (f"{teams.url}?a=1#frag", f"{teams.url}?a b", f"{teams.url}?"):
        with pytest.raises(NotifyConfigError) as refused:
            subscription_create(actor=ROBOT, owner=None, data={"name": "x", "channel": "teams", "target": bad,
                                                               "events": ["approval.pending"]})
        assert refused.value.code == "notify_url_invalid"


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 OK"


def test_an_email_reaches_a_real_smtp_server_with_text_and_html_parts_and_the_link(settings, event, carol):
    inbox = Inbox()
    with socket.socket() as probe:  # a free port (aiosmtpd's own start-up check needs a real one)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        settings.SKALD_SYNC_TASKS = True
        settings.SKALD_PUBLIC_URL = "https://skald.example.org"
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
        settings.EMAIL_USE_TLS = False
        carol.email = "carol@example.org"
        carol.save()
        subscription_create(actor=Actor.user(carol), owner=carol, data={
            "name": "me", "channel": "user_email", "events": ["approval.pending"]})
        notification_record(event=event())
    finally:
        controller.stop()
    (message,) = inbox.messages
    assert message["To"] == "carol@example.org" and "An approval is waiting" in message["Subject"]
    parts = {part.get_content_type(): part.get_payload(decode=True).decode() for part in message.walk()
             if not part.is_multipart()}
    assert set(parts) == {"text/plain", "text/html"}
    assert "https://skald.example.org/admin/x/1/change/" in parts["text/plain"]
    assert 'href="https://skald.example.org/admin/x/1/change/"' in parts["text/html"]
    assert "Requested by: alice" in parts["text/plain"]
    assert Delivery.objects.get().status == DeliveryStatus.SENT


def test_an_unparsable_cidr_list_fails_the_system_check(settings):
    from skald.checks import check_notification_settings

    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8,not-a-cidr"
    assert [e.id for e in check_notification_settings()] == ["skald.E030"]
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"
    assert check_notification_settings() == []
