"""The admin home, one panel per role the viewer holds (SPEC O3, issue 13).

Operator: open cases and live runs. Approver: the pending queue with its count and ages.
Reviewer: pending proposals. Auditor: the chain's status. A panel links only to pages its role may
open; a superuser sees every panel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.http import HttpRequest
from django.urls import reverse
from django.utils.timesince import timesince

from approvals.models import ApprovalStatus, PendingApproval
from audit.services import chain_head_export_latest, chain_verify_incremental
from proposals.models import Proposal, ProposalStatus
from skald.core.clock import now
from skald.core.roles import Role, has_role
from skald.models import Case, CaseStatus, Run, RunStatus

LIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_HUMAN, RunStatus.HANDOFF)
ROWS = 8


@dataclass
class Cell:
    text: str
    url: str = ""
    css: str = ""


@dataclass
class Panel:
    key: str
    title: str
    lead: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    actions: list[Cell] = field(default_factory=list)
    empty: str = "Nothing here."
    tone: str = ""  # "ok" | "warn" | "bad": the lead's colour
    topics: tuple[str, ...] = ()  # the live topics (skald.core.live) whose changes it shows


def age(moment: datetime | None) -> str:
    return f"{timesince(moment, now()).split(',')[0]} ago" if moment else "—"


def home_panels(request: HttpRequest) -> list[Panel]:
    user = request.user
    panels: list[Panel] = []
    if user.has_perm("skald.view_case"):
        panels += [_cases(may_launch=has_role(user, Role.WORKFLOW) and user.has_perm("skald.write_case")),
                   _live_runs()]
    if user.has_perm("approvals.resolve_approval"):
        panels.append(_approvals())
    if user.has_perm("proposals.dispose_proposal"):
        panels.append(_proposals())
    if user.has_perm("audit.view_auditevent"):
        panels.append(_chain())
    return panels


def _status(run: Run) -> Cell:
    return Cell(run.get_status_display(), css=f"status status-{run.status}")


def _cases(*, may_launch: bool) -> Panel:
    cases = list(Case.objects.filter(status=CaseStatus.OPEN).order_by("-id")[:ROWS])
    latest: dict[int, Run] = {}
    for found in Run.objects.filter(case__in=cases).order_by("case_id", "-id"):
        latest.setdefault(found.case_id, found)
    rows = []
    for case in cases:
        last = latest.get(case.pk)
        rows.append([
            Cell(case.title, reverse("admin:skald_case_change", args=[case.pk])),
            _status(last) if last else Cell("no run yet", css="muted"),
            Cell("Launch a run", reverse("admin:skald_case_launch", args=[case.pk]), css="button") if may_launch
            else Cell(""),
        ])
    return Panel("cases", "Open cases", f"{Case.objects.filter(status=CaseStatus.OPEN).count()} open",
                 ["case", "latest run", ""], rows,
                 [Cell("All cases", reverse("admin:skald_case_changelist"))], empty="No open case.",
                 topics=("runs",))


def _live_runs() -> Panel:
    runs = list(Run.objects.filter(status__in=LIVE_STATUSES).select_related("case", "launched_by")
                .order_by("-id")[:ROWS])
    rows = [[Cell(f"Run #{run.pk}", reverse("admin:skald_run_change", args=[run.pk])), Cell(run.case.title),
             _status(run), Cell(run.launched_by.get_username()), Cell(age(run.created_at))] for run in runs]
    count = Run.objects.filter(status__in=LIVE_STATUSES).count()
    waiting = Run.objects.filter(status__in=[RunStatus.AWAITING_HUMAN, RunStatus.HANDOFF]).count()
    return Panel("runs", "Live runs", f"{count} live, {waiting} waiting for a human",
                 ["run", "case", "status", "launched by", "started"], rows,
                 [Cell("All runs", reverse("admin:skald_run_changelist"))], empty="No run is live.",
                 tone="warn" if waiting else "", topics=("runs",))


def _approvals() -> Panel:
    pending = PendingApproval.objects.filter(status=ApprovalStatus.PENDING)
    oldest = pending.order_by("created_at").values_list("created_at", flat=True).first()
    items = list(pending.select_related("requested_by", "session__run__case").order_by("created_at")[:ROWS])
    rows = []
    for item in items:
        run = getattr(item.session, "run", None)
        rows.append([
            Cell(item.tool, reverse("admin:approvals_pendingapproval_change", args=[item.pk])),
            Cell(run.case.title if run else f"console session #{item.session_id}"),
            Cell(item.requested_by.get_username() if item.requested_by else "—"),
            Cell(age(item.created_at)),
        ])
    count = pending.count()
    lead = f"{count} waiting" + (f", oldest {age(oldest)}" if oldest else "")
    return Panel("approvals", "Approvals waiting for you", lead, ["tool", "case", "requested by", "waiting"], rows,
                 [Cell("Open the queue", reverse("admin:approvals_pendingapproval_changelist"))],
                 empty="No call is waiting for approval.", tone="warn" if count else "ok", topics=("approvals",))


def _proposals() -> Panel:
    pending = Proposal.objects.filter(status=ProposalStatus.PENDING)
    items = list(pending.select_related("run__case").order_by("created_at")[:ROWS])
    rows = [[Cell(p.title, reverse("admin:proposals_proposal_change", args=[p.pk])),
             Cell(p.run.case.title if p.run else "—"), Cell(age(p.created_at))] for p in items]
    count = pending.count()
    queue = reverse("admin:proposals_proposal_changelist") + "?status__exact=pending"
    return Panel("proposals", "Proposals to review", f"{count} pending", ["proposal", "case", "captured"], rows,
                 [Cell("Open the review queue", queue)], empty="No proposal is waiting.",
                 tone="warn" if count else "ok", topics=("proposals",))


def _chain() -> Panel:
    # Incremental: each refresh reads only the rows appended since the last pass, so the home's
    # cost does not grow with the chain; "Verify now" reads it all.
    report, tip = chain_verify_incremental()
    head = chain_head_export_latest()
    if report.ok and tip is not None:
        lead, tone = (f"Chain intact up to seq {report.tip_seq}: new rows are checked as they arrive; "
                      f"the whole chain was last verified {age(tip.full_at)}."), "ok"
    else:
        lead, tone = f"Chain broken at seq {report.first_bad_seq}: {report.reason}", "bad"
    if head is None:
        head_text = ("No head recorded yet. A recorded head pins the tip, so a later verify also "
                     "detects rows cut from the end; a superuser records one.")
    else:
        head_text = f"Last recorded head: seq {head['seq']}, {'signed' if head.get('signature') else 'unsigned'}."
    return Panel("audit", "Audit chain", lead, ["", ""], [[Cell("Recorded head"), Cell(head_text)]],
                 [Cell("Verify now", reverse("admin:audit_auditevent_verify")),
                  Cell("Browse the log", reverse("admin:audit_auditevent_changelist"))], tone=tone,
                 topics=("audit",))


def live_topics_of(panels: list[Panel]) -> str:
    """The topics a page showing ``panels`` follows, as its ``data-live-topics`` attribute."""
    return ",".join(sorted({topic for panel in panels for topic in panel.topics}))
