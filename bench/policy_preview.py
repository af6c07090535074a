"""The policy impact preview's cost for ``make bench`` (issue 32): 100,000 recorded gate decisions
re-decided under a proposed policy, in process, no database (the preview is pure; reading the
history is one audit query and chunked call look-ups, not measured here)."""

from __future__ import annotations

import os
import random
import statistics
import time

TARGET_S = 2.0
DECISIONS = 100_000
REPEATS = 3


def _setup() -> None:
    import django
    from django.apps import apps

    if not apps.ready:  # the preview's modules name the rule sets as the selectors do
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skald.settings")
        django.setup()


def workload(seed: int = 32) -> tuple[object, list[object]]:
    """A policy of ~60 rules in 6 sets and a week of varied calls (many distinct arguments)."""
    from approvals.policy_doc.document import GroupDoc, RuleDoc, policy_doc
    from approvals.policy_doc.impact import RecordedDecision

    rng = random.Random(seed)
    tools = [f"tool_{n}" for n in range(30)] + ["read_file", "write_file", "execute_cmd"]
    users = [f"user{n}" for n in range(50)]
    agents = ["troubleshooter", "log-analyst", "reporter", "triage", "deployer"]
    actions = ["allow", "require", "deny"]

    def rule() -> RuleDoc:
        matchers = rng.choice([(), (), (("path", f"dir{rng.randrange(20)}/*"),),
                               (("argv.0", rng.choice(["rm", "ls"])),)])
        return RuleDoc(tool=rng.choice([*tools, "tool_1*", "write_*", "*"]), action=rng.choice(actions),
                       priority=rng.randrange(1, 200), args=matchers)

    groups = [GroupDoc(name=f"group{g}", users=tuple(rng.sample(users, 10)), agents=tuple(rng.sample(agents, 1)),
                       rules=tuple(rule() for _ in range(6))) for g in range(5)]
    doc = policy_doc(rules=[*(rule() for _ in range(30)), RuleDoc(tool="*", action="require", priority=999_999)],
                     groups=groups)
    arg_pool = [{"path": f"dir{rng.randrange(40)}/file{n}.md"} if n % 2
                else {"argv": [rng.choice(["rm", "ls"]), f"x{n}"]} for n in range(5_000)]
    history = [RecordedDecision(str(n), rng.choice(tools), rng.choice(arg_pool), rng.choice(actions),
                                rng.choice(users), rng.choice(agents), f"h{n % 5000}") for n in range(DECISIONS)]
    return doc, history


def report() -> str:
    _setup()
    from approvals.policy_doc.impact import impact_preview

    doc, history = workload()
    timings = []
    impact = None
    for _ in range(REPEATS):
        started = time.perf_counter()
        impact = impact_preview(history, doc)  # type: ignore[arg-type]
        timings.append(time.perf_counter() - started)
    median = statistics.median(timings)
    verdict = "PASS" if median <= TARGET_S else "FAIL"
    assert impact is not None
    return (f"policy impact preview: {DECISIONS:,} recorded decisions re-decided in {median:.2f} s "
            f"(median of {REPEATS}; target <= {TARGET_S:.0f} s: {verdict}); {impact.changed:,} would change")


if __name__ == "__main__":
    print(report())
