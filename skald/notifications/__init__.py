"""Notifications (issue 31, SPEC X3): human seams reach people where they work.

Features record an :class:`~skald.notifications.events.Event` with
:func:`~skald.notifications.services.notification_record` inside the transaction of the change it
announces; one outbox row (:class:`~skald.notifications.models.Delivery`) per matching subscription
is written there and sent on commit (:mod:`skald.notifications.send`). The sweep sends what a crash
or a failing receiver left due. docs/notifications.md is the reader's guide.
"""
