"""``GET /api/{source}/tasks`` and ``POST /api/{source}/tasks/{id}/cancel`` (SPEC S5): the task
strip's load-time answer; live changes arrive as ``task.update`` events on the session websocket."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from skald.api.sessions import ANY_ROLE
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import caller
from skald.jobs import selectors, services
from skald.jobs.models import ScheduledJob


class TaskSerializer(serializers.ModelSerializer):
    run = serializers.SerializerMethodField()

    class Meta:
        model = ScheduledJob
        fields = ["id", "kind", "status", "agent", "task", "tools", "source", "parent_session", "child_session",
                  "created_at", "updated_at", "run"]

    def get_run(self, job: ScheduledJob) -> dict[str, Any] | None:
        runs = list(job.runs.all())  # prefetched, in order
        if not runs:
            return None
        last = runs[-1]
        return {"number": last.number, "status": last.status, "error": last.error,
                "delivered": last.delivered_at is not None, "ended_at": last.ended_at}


class TaskList(ListAPIView):
    """Running tasks plus failures of the last 30 minutes, newest first, paginated (limit/offset)."""

    permission_classes = [ANY_ROLE]
    serializer_class = TaskSerializer

    @extend_schema(operation_id="task_list", summary="A source's running tasks and recent failures",
                   responses={200: TaskSerializer(many=True), **error_responses()})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no caller
            return ScheduledJob.objects.none()
        return selectors.tasks_for(user=caller(self.request), source=self.kwargs["source"])


class TaskCancel(APIView):
    permission_classes = [ANY_ROLE]

    @extend_schema(operation_id="task_cancel", summary="Cancel a running task",
                   request=None, responses={202: TaskSerializer,
                                            **error_responses(_404="task_not_found", _409="job_not_active")})
    def post(self, request: Request, source: str, job_id: int) -> Response:
        job = selectors.task_get(user=caller(request), job_id=job_id)
        services.job_cancel(job_id=job.pk, principal=f"user:{caller(request).pk}")
        job = selectors.task_get(user=caller(request), job_id=job.pk)  # as it is now: maybe ended already
        return Response(TaskSerializer(job).data, status=status.HTTP_202_ACCEPTED)
