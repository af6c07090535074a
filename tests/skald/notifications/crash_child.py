"""A worker process for the notification crash test: ``record`` subscribes the loopback receiver and
records one event (its send dies at the failpoint the environment names); ``recover`` runs the
sweep a minute later, as a restarted worker would."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")


def main(role: str, url: str) -> None:
    import django

    django.setup()
    import time_machine
    from django.db import transaction

    from audit.actors import Actor
    from skald.core import clock
    from skald.notifications.events import Event, EventKind
    from skald.notifications.services import subscription_create
    from skald.tasks import sweep_notifications

    if role == "record":
        subscription = subscription_create(actor=Actor.system("crash"), owner=None, data={
            "name": "hook", "channel": "webhook", "target": url, "events": ["approval.pending"]})
        print(json.dumps({"secret": subscription.secret}), flush=True)
        from skald.notifications.services import notification_record

        with transaction.atomic():
            notification_record(event=Event(kind=EventKind.APPROVAL_PENDING, subject="approval:crash",
                                            summary="write_file asks for approval", link_path="/admin/",
                                            occurred_at=clock.now()))
        print("sent without dying", flush=True)  # the failpoint never fired
        return
    with time_machine.travel(clock.now() + timedelta(minutes=1), tick=False):  # past any lease
        print(json.dumps(sweep_notifications()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
