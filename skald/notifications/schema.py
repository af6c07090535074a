"""The webhook payload's JSON Schema (``skald.notification.v1``), published as the OpenAPI
component ``NotificationPayload``. Pure data: the settings module reads it."""

from __future__ import annotations

from typing import Any

EVENT_TYPES = ("approval.pending", "approval.escalated", "approval.expiring", "approval.expired", "proposal.pending",
               "handoff.waiting", "run.failed", "run.stuck", "task.dead_lettered", "audit.chain_broken")

PAYLOAD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The body of every notification webhook (Standard Webhooks: the webhook-id, webhook-timestamp "
                   "and webhook-signature headers sign it). Slack, Teams and e-mail messages are rendered from it.",
    "required": ["version", "event_id", "type", "title", "occurred_at", "subject", "summary", "requested_by", "risk",
                 "agent", "security_group", "case", "link", "data"],
    "properties": {
        "version": {"type": "string", "const": "skald.notification.v1"},
        "event_id": {"type": "string", "format": "uuid", "description": "The event; every subscription told of it "
                                                                        "gets the same id."},
        "type": {"type": "string", "enum": list(EVENT_TYPES)},
        "title": {"type": "string"},
        "occurred_at": {"type": "string", "format": "date-time"},
        "subject": {"type": "string", "description": "What it is about, e.g. approval:<request id>."},
        "summary": {"type": "string", "description": "What is asked, or what went wrong."},
        "requested_by": {"type": "string", "description": "The username that asked (empty when nobody did)."},
        "risk": {"type": "string", "enum": ["low", "medium", "high"]},
        "agent": {"type": "string"},
        "security_group": {"type": "string"},
        "case": {"type": "string"},
        "link": {"type": "string", "format": "uri", "description": "The page where a person acts (sign-in "
                                                                  "required; the link decides nothing)."},
        "data": {"type": "object", "additionalProperties": True, "description": "Event-specific fields."},
    },
    "additionalProperties": False,
}


def notification_components() -> dict[str, dict[str, Any]]:
    return {"NotificationPayload": PAYLOAD_SCHEMA}
