"""A document's references checked against the database, by path: group members that do not exist,
agents listed that do not exist, and agents that exist but are not listed (a document cannot create
or delete an agent: it governs every agent's tools and bounds, so it lists every agent)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from approvals.policy_doc.document import PolicyDoc
from approvals.policy_doc.parse import Problem
from skald.models import Agent


def members_resolve(doc: PolicyDoc) -> tuple[dict[str, Any], dict[str, Agent], list[Problem]]:
    """(users by username, agents by name, problems): three queries."""
    usernames = {name for group in doc.groups for name in group.users}
    agent_names = {name for group in doc.groups for name in group.agents} | {a.name for a in doc.agents}
    user_model = get_user_model()
    users = {user.get_username(): user for user in user_model.objects.filter(
        **{f"{user_model.USERNAME_FIELD}__in": sorted(usernames)})}
    agents = {agent.name: agent for agent in Agent.objects.filter(name__in=sorted(agent_names))}
    problems: list[Problem] = []
    for g, group in enumerate(doc.groups):
        base = group.path or f"groups[{g}]"
        # The path names the list: members are sorted on parsing, so an index would not be the file's.
        problems += [Problem(f"{base}.users", "unknown_user", f"No user is named {name!r}.")
                     for name in group.users if name not in users]
        problems += [Problem(f"{base}.agents", "unknown_agent", f"No agent is named {name!r}.")
                     for name in group.agents if name not in agents]
    problems += [Problem(f"{agent.path or f'agents[{i}]'}.name", "unknown_agent", f"No agent is named {agent.name!r}.")
                 for i, agent in enumerate(doc.agents) if agent.name not in agents]
    listed = {agent.name for agent in doc.agents}
    unlisted = Agent.objects.exclude(name__in=sorted(listed)).order_by("name").values_list("name", flat=True)
    problems += [Problem("agents", "missing_agent", f"The agent {name!r} is not listed; a document lists every agent "
                         "(it cannot delete one: that is done in the admin).") for name in unlisted]
    return users, agents, problems
