"""The REST API root: each app contributes its routes here."""

from __future__ import annotations

from django.urls import include, path

from approvals.pending import api as api_pending
from skald.api import cases, mcp, notifications, sessions, tasks
from skald.api.inspect import InspectView
from skald.api.replay import ReplayVerifyView

urlpatterns = [
    path("approval/", include("approvals.urls")),
    path("audit/", include("audit.urls")),
    path("inspect", InspectView.as_view(), name="inspect"),
    path("policy/", include("approvals.policy_urls")),
    path("mcp/servers/", mcp.ServerList.as_view(), name="mcp-servers"),
    path("mcp/servers/<slug:name>/", mcp.ServerDetail.as_view(), name="mcp-server"),
    path("mcp/servers/<slug:name>/tools/", mcp.ServerTools.as_view(), name="mcp-server-tools"),
    path("mcp/elicitations/", mcp.ElicitationList.as_view(), name="mcp-elicitations"),
    path("mcp/elicitations/<int:elicitation_id>/answer", mcp.ElicitationAnswerView.as_view(),
         name="mcp-elicitation-answer"),
    path("notifications/subscriptions/", notifications.SubscriptionList.as_view(), name="notification-subscriptions"),
    path("notifications/subscriptions/<int:subscription_id>/", notifications.SubscriptionDetail.as_view(),
         name="notification-subscription"),
    path("notifications/subscriptions/<int:subscription_id>/deliveries/",
         notifications.SubscriptionDeliveries.as_view(), name="notification-deliveries"),
    path("notifications/deliveries/<int:delivery_id>/retry", notifications.DeliveryRetry.as_view(),
         name="notification-delivery-retry"),
    path("proposals/", include("proposals.urls")),
    path("runs/<int:run_id>/replay-verify", ReplayVerifyView.as_view(), name="run-replay-verify"),
    path("sessions/", sessions.SessionListCreate.as_view(), name="sessions"),
    path("sessions/<int:session_id>/", sessions.SessionDetail.as_view(), name="session"),
    path("sessions/<int:session_id>/messages/", sessions.SessionMessages.as_view(), name="session-messages"),
    path("sessions/<int:session_id>/exchanges/<int:exchange_id>/", sessions.ExchangeDetail.as_view(),
         name="session-exchange"),
    path("sessions/<int:session_id>/events/", sessions.SessionEvents.as_view(), name="session-events"),
    path("sessions/<int:session_id>/stop/", sessions.SessionStop.as_view(), name="session-stop"),
    path("cases/", cases.CaseListCreate.as_view(), name="cases"),
    path("cases/<int:case_id>/", cases.CaseDetail.as_view(), name="case"),
    path("runs/", cases.RunList.as_view(), name="runs"),
    path("runs/<int:run_id>/", cases.RunDetail.as_view(), name="run"),
    path("runs/<int:run_id>/events/", cases.RunEvents.as_view(), name="run-events"),
    path("runs/<int:run_id>/stop/", cases.RunStop.as_view(), name="run-stop"),
    path("approvals/", api_pending.ApprovalList.as_view(), name="approvals"),
    path("approvals/<str:request_id>/resolve", api_pending.ApprovalResolve.as_view(), name="approval-resolve"),
    path("approvals/batches/<int:session_id>/<str:batch>/resolve", api_pending.BatchResolve.as_view(),
         name="approval-batch-resolve"),
    path("tools/<int:tool_call_id>/resolve", api_pending.ToolCallResolve.as_view(), name="tool-call-resolve"),
    # Last: ``{source}`` is a free slug (a chat source such as ``web``), matched after every fixed route.
    path("<slug:source>/tasks", tasks.TaskList.as_view(), name="source-tasks"),
    path("<slug:source>/tasks/<int:job_id>/cancel", tasks.TaskCancel.as_view(), name="source-task-cancel"),
]
