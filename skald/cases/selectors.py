"""Case and run reads, scoped per role and written to avoid N+1."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, QuerySet

from skald.core.errors import NotFound
from skald.core.roles import Role, has_role
from skald.models import Case, CaseLog, Run


def cases_list() -> QuerySet[Case]:
    return Case.objects.prefetch_related(Prefetch("logs", queryset=CaseLog.objects.order_by("id")))


def case_get(*, case_id: int) -> Case:
    case = cases_list().filter(pk=case_id).first()
    if case is None:
        raise NotFound("No such case.", code="case_not_found")
    return case


def runs_visible_to(user: AbstractBaseUser) -> QuerySet[Run]:
    runs = Run.objects.select_related("case", "launched_by", "session")
    if has_role(user, Role.OPERATOR, Role.AUDITOR):
        return runs
    return runs.filter(launched_by_id=user.pk)


def run_get(*, user: AbstractBaseUser, run_id: int) -> Run:
    run = runs_visible_to(user).filter(pk=run_id).first()
    if run is None:
        raise NotFound("No such run.", code="run_not_found")
    return run
