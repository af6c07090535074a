"""The impact preview: recorded gate decisions re-decided under a proposed policy (issue 32).

The differential test checks the batched preview against the engine run call by call; the database
tests check that the preview's scopes are the gate's, and that it reads what the gate recorded.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
import yaml
from django.contrib.auth.models import User
from django.db import transaction
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.policy_doc.apply import policy_apply
from approvals.policy_doc.document import GroupDoc, PolicyDoc, RuleDoc, policy_doc
from approvals.policy_doc.export import policy_export
from approvals.policy_doc.history import _first_seq_since, recorded_decisions
from approvals.policy_doc.impact import RecordedDecision, impact_between, impact_preview, redecide, transition
from approvals.policy_doc.parse import load_text, parse
from approvals.policy_doc.plan import policy_plan
from approvals.rules.engine import SEVERITY
from approvals.rules.policy import decide
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.providers.loopback import text_turn, tool_turn
from skald.sessions.services import session_message_submit
from tests.approvals.policy_fixtures import ADMIN, configure
from tests.approvals.test_policy_doc_command import run

TOOLS = ["read_logs", "write_file", "execute_cmd", "deploy"]
USERS = ["alice", "bob", "carol"]
AGENTS = ["troubleshooter", "log-analyst"]
ACTIONS = ["allow", "require", "deny"]
ARGS = [{}, {"path": "reports/a.md"}, {"path": "etc/passwd"}, {"argv": ["rm", "-rf"]}, {"argv": ["ls"]},
        {"path": 3}, ["not", "a", "mapping"]]

rules = st.builds(
    RuleDoc,
    tool=st.sampled_from([*TOOLS, "*", "read_*", "write_?", "exec*"]),
    action=st.sampled_from(ACTIONS),
    priority=st.integers(0, 4),  # few values: ties are where the engine's order matters
    args=st.sampled_from([(), (("path", "reports/*"),), (("argv.0", "rm"),), (("path", "3"),)]),
    enabled=st.booleans(),
)
groups = st.builds(
    GroupDoc,
    name=st.sampled_from(["auditors", "ops", "release"]),
    users=st.lists(st.sampled_from(USERS), unique=True).map(tuple),
    agents=st.lists(st.sampled_from(AGENTS), unique=True).map(tuple),
    rules=st.lists(rules, max_size=4).map(tuple),
)
policies = st.builds(
    lambda r, g: policy_doc(rules=r, groups=list({group.name: group for group in g}.values())),
    st.lists(rules, max_size=6), st.lists(groups, max_size=3),
)
records = st.builds(
    RecordedDecision,
    call_id=st.integers(1, 10_000).map(str),
    tool=st.sampled_from([*TOOLS, "other"]),
    args=st.sampled_from(ARGS),
    action=st.sampled_from(ACTIONS),
    user=st.sampled_from([*USERS, None]),
    agent=st.sampled_from([*AGENTS, None]),
    arguments_hash=st.sampled_from(["h1", "h2"]),
)


@settings(max_examples=50)
@given(doc=policies, history=st.lists(records, max_size=40))
def test_the_preview_counts_what_the_engine_decides_call_by_call(doc: PolicyDoc, history: list[RecordedDecision]
                                                                 ) -> None:
    impact = impact_preview(history, doc)
    after = [redecide(record, doc) for record in history]
    changed = [(r, a) for r, a in zip(history, after, strict=True) if a != r.action]
    assert impact.total == len(history) and impact.changed == len(changed)
    assert impact.transitions == dict(Counter(transition(r.action, a) for r, a in changed))
    assert impact.loosened == sum(SEVERITY[a] < SEVERITY[r.action] for r, a in changed)
    assert impact.tightened == impact.changed - impact.loosened
    assert impact.users == dict(Counter(r.user for r, _ in changed if r.user is not None))
    assert impact.agents == dict(Counter(r.agent for r, _ in changed if r.agent))
    assert sum(call.count for call in impact.top_calls) <= impact.changed and len(impact.top_calls) <= 10
    # Against itself a policy changes nothing, whatever the recorded verdicts were.
    assert impact_between(history, doc, doc).changed == 0


def test_the_top_calls_are_the_most_frequent_changes() -> None:
    doc = policy_doc(rules=[RuleDoc(tool="*", action="allow", priority=1)])
    history = [RecordedDecision(str(i), "write_file", {}, "require", "alice", None, "w") for i in range(5)]
    history += [RecordedDecision(str(10 + i), "deploy", {}, "deny", "bob", "troubleshooter", "d") for i in range(2)]
    impact = impact_preview(history, doc, days=7)
    assert [(c.tool, c.count, c.call_ids) for c in impact.top_calls] == [
        ("write_file", 5, ("0", "1", "2")), ("deploy", 2, ("10", "11"))]
    assert impact.transitions == {"approval → allowed": 5, "denied → allowed": 2}
    assert impact.words()[:2] == ["7 of 7 recorded calls in the last 7 days would be decided differently.",
                                  "7 would loosen and 0 would tighten; 2 users and 1 agent are affected."]


@pytest.mark.django_db
@pytest.mark.db_sensitive
def test_the_preview_scopes_calls_as_the_gate_does(alice: User, bob: User) -> None:
    configure(alice)
    doc = parse(load_text(policy_export()[0]))
    policy_apply(actor=ADMIN, doc=doc)
    for user, agent in [(alice, "troubleshooter"), (bob, "troubleshooter"), (bob, "log-analyst"), (bob, None)]:
        for tool, args in [("execute_cmd", {}), ("write_file", {"path": "reports/x"}), ("write_file", {}),
                           ("read_logs", {}), ("unknown", {})]:
            record = RecordedDecision("1", tool, args, "allow", user.username, agent)
            assert redecide(record, doc) == decide(tool=tool, args=args, user_id=user.pk, agent=agent).action


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_plan_previews_the_calls_the_gate_recorded(alice, troubleshooting, script) -> None:
    """alice's write was parked for approval; a document that allows writes shows it as approval → allowed."""
    script(tool_turn(("write_file", {"path": "reports/a.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")
    [recorded] = recorded_decisions(days=7).decisions
    assert (recorded.tool, recorded.action, recorded.user, recorded.agent) == (
        "write_file", "require", "alice", "troubleshooter")
    assert recorded.args == {"path": "reports/a.md", "content": "x"}

    data = yaml.safe_load(policy_export()[0])
    next(r for r in data["rules"] if r["tool"] == "write_file")["action"] = "allow"
    impact = policy_plan(parse(data)).impact
    assert impact is not None and (impact.total, impact.transitions) == (1, {"approval → allowed": 1})
    assert impact.users == {"alice": 1} and impact.agents == {"troubleshooter": 1}
    assert impact.top_calls[0].call_ids == (recorded.call_id,)
    assert impact.notes == ()

    # The same document once the live policy already allows writes: the call still counts (its
    # recorded verdict was an approval), and the plan says the live policy moved since.
    policy_apply(actor=ADMIN, doc=parse(data))
    again = policy_plan(parse(data)).impact
    assert again is not None and again.transitions == {"approval → allowed": 1}
    assert again.notes[0].startswith("1 of these calls would already be decided differently by the live policy")


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_the_plan_command_links_the_changed_calls(alice, troubleshooting, script, tmp_path) -> None:
    script(tool_turn(("write_file", {"path": "reports/a.md", "content": "x"})), text_turn("done"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")
    [recorded] = recorded_decisions(days=7).decisions
    data = yaml.safe_load(policy_export()[0])
    next(r for r in data["rules"] if r["tool"] == "write_file")["action"] = "allow"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    status, out, _ = run("plan", str(path), "--json")
    link = f"/admin/loop/toolcall/{recorded.call_id}/change/"
    assert status == 0 and json.loads(out)["impact"]["top_calls"][0]["links"] == [link]
    assert f"1 call of write_file (approval → allowed), e.g. {link}" in run("plan", str(path))[1]


@pytest.mark.django_db
@pytest.mark.db_sensitive
def test_the_history_starts_at_the_first_row_of_the_window_by_binary_search() -> None:
    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    seqs = []
    for days_ago in (30, 20, 10, 10, 6, 3, 1):
        with time_machine.travel(now - timedelta(days=days_ago), tick=False), transaction.atomic():
            seqs.append(audit_append(actor=Actor.system("t"), kind=AuditKind.DEMO_SEEDED, subject_type="t",
                                     subject_id="1", payload={}).seq)
    assert _first_seq_since(now - timedelta(days=7)) == seqs[4]
    assert _first_seq_since(now - timedelta(days=10)) == seqs[2]
    assert _first_seq_since(now - timedelta(days=99)) == seqs[0]
    assert _first_seq_since(now) == seqs[-1] + 1
