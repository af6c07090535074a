"""``/api/policy/…``: the governance configuration over REST (issue 32), admins only."""

from __future__ import annotations

from django.urls import path

from approvals.agents.policy_api import AgentPolicyDetail, AgentPolicyList
from approvals.policy_doc.api import PolicyApplyView, PolicyPlanView
from approvals.rules.policy_api import GroupDetail, GroupList, RuleDetail, RuleList
from approvals.tripwires import policy_api as tripwires

urlpatterns = [
    path("rules/", RuleList.as_view(), name="policy-rules"),
    path("rules/<int:rule_id>/", RuleDetail.as_view(), name="policy-rule"),
    path("groups/", GroupList.as_view(), name="policy-groups"),
    path("groups/<int:group_id>/", GroupDetail.as_view(), name="policy-group"),
    path("tripwires/patterns/", tripwires.PatternList.as_view(), name="policy-tripwire-patterns"),
    path("tripwires/patterns/<int:pattern_id>/", tripwires.PatternDetail.as_view(), name="policy-tripwire-pattern"),
    path("tripwires/allow/", tripwires.AllowList.as_view(), name="policy-tripwire-allow-list"),
    path("tripwires/allow/<int:entry_id>/", tripwires.AllowDetail.as_view(), name="policy-tripwire-allow"),
    path("agents/", AgentPolicyList.as_view(), name="policy-agents"),
    path("agents/<int:agent_id>/", AgentPolicyDetail.as_view(), name="policy-agent"),
    path("plan", PolicyPlanView.as_view(), name="policy-plan"),
    path("apply", PolicyApplyView.as_view(), name="policy-apply"),
]
