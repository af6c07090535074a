"""Bodies for each channel, rendered from the versioned payload (pure).

A chat message reads on its own in the chat app: what is asked, by whom, the risk, and the link.
"""

from __future__ import annotations

from html import escape
from typing import Any


def _lines(payload: dict[str, Any]) -> list[tuple[str, str]]:
    facts = [("What", payload["summary"]), ("Risk", payload["risk"])]
    if payload.get("requested_by"):
        facts.append(("Requested by", payload["requested_by"]))
    for label, key in (("Agent", "agent"), ("Security group", "security_group"), ("Case", "case")):
        if payload.get(key):
            facts.append((label, str(payload[key])))
    return facts


def slack_body(payload: dict[str, Any]) -> dict[str, Any]:
    """Slack-compatible incoming-webhook JSON: ``text`` (notifications, fallbacks) plus blocks."""
    facts = "\n".join(f"*{label}:* {value}" for label, value in _lines(payload))
    return {
        "text": f"{payload['title']}: {payload['summary']} <{payload['link']}|Open in Skald>",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": payload["title"][:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": facts[:3000]}},
            {"type": "actions", "elements": [
                {"type": "button", "text": {"type": "plain_text", "text": "Open in Skald"}, "url": payload["link"]},
            ]},
        ],
    }


def teams_body(payload: dict[str, Any]) -> dict[str, Any]:
    """Teams-compatible incoming-webhook JSON: a MessageCard with facts and an open-URI action."""
    return {
        "@type": "MessageCard",
        "@context": "https://schema.org/extensions",
        "summary": f"{payload['title']}: {payload['summary']}"[:200],
        "themeColor": {"high": "C4314B", "medium": "E3A21A"}.get(payload["risk"], "2F6FDF"),
        "title": payload["title"],
        "sections": [{"facts": [{"name": label, "value": value} for label, value in _lines(payload)]}],
        "potentialAction": [{"@type": "OpenUri", "name": "Open in Skald",
                             "targets": [{"os": "default", "uri": payload["link"]}]}],
    }


def email_parts(payload: dict[str, Any]) -> tuple[str, str, str]:
    """(subject, plain text, HTML) of the e-mail for ``payload``."""
    subject = f"[Skald] {payload['title']}: {payload['summary']}"[:180]
    facts = _lines(payload)
    text = "\n".join([payload["title"], "", *(f"{label}: {value}" for label, value in facts), "",
                      f"Open it in Skald (sign-in required): {payload['link']}", "",
                      f"Event {payload['event_id']} ({payload['type']})"])
    rows = "".join(f"<tr><th align='left'>{escape(label)}</th><td>{escape(value)}</td></tr>" for label, value in facts)
    html = (f"<h2>{escape(payload['title'])}</h2><table>{rows}</table>"
            f"<p><a href=\"{escape(payload['link'])}\">Open it in Skald</a> (sign-in required)</p>"
            f"<p style='color:#777'>Event {escape(payload['event_id'])} ({escape(payload['type'])})</p>")
    return subject, text, html
