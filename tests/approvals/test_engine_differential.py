"""Differential test: the engine against a deliberately naive reference of the same semantics.

10,000 generated (rule sets x call) examples over a small alphabet, so priorities tie, patterns
overlap, argument paths go missing and the odd rule is malformed. Zero mismatches allowed.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from approvals.rules.engine import RuleSet, RuleView, check
from tests.strength import examples

TOOLS = ["read_file", "write_file", "execute_cmd", "ask_human", "x"]
# Drawn uniformly: "*" repeats so that more rules match and conflict.
PATTERNS = ["*", "*", "*", "read_*", "*_file", "write_file", "execute_cmd", "execute_?md", "[re]*", "ask_human",
            "nomatch", "?"]
PATHS = ["path", "argv.0", "argv.1", "n", "opts.mode", "argv", "opts"]
# '*"*' tells JSON ('["rm"]') from Python's str ("['rm']"); "true"/"null" tell JSON from str too.
GLOBS = ["*", "reports/*", "uptime", "u*", "3", "true", "null", '*"*', "fast", "?"]
ACTIONS = ["allow", "deny", "require"]
# One rule in about 150 is broken in one of these ways (a few percent of the examples fault).
DEFECTS = [None] * 600 + ["action", "matchers", "glob", "priority"]

SEVERITY_ORDER = ["deny", "require", "allow"]  # most restrictive first
MISSING = object()


# --- the reference: sort and scan, written without looking at the engine -------------------------

def naive_well_formed(rule: RuleView) -> bool:
    if not rule.enabled:
        return True
    return (
        rule.action in SEVERITY_ORDER
        and type(rule.priority) is int
        and isinstance(rule.tool_pattern, str) and rule.tool_pattern != ""
        and isinstance(rule.arg_matchers, dict)
        and all(type(k) is str and type(v) is str for k, v in rule.arg_matchers.items())
    )


def naive_lookup(args: Any, path: str) -> Any:
    value = args
    for segment in path.split("."):
        try:
            if isinstance(value, dict):
                value = value[segment]
            elif isinstance(value, list) and segment.isdigit():
                value = value[int(segment)]
            else:
                return MISSING
        except (KeyError, IndexError):
            return MISSING
    return value


def naive_glob(text: str, glob: str) -> bool:
    return re.fullmatch(fnmatch.translate(glob), text, flags=re.DOTALL) is not None


def naive_matches(rule: RuleView, tool: str, args: dict[str, Any]) -> bool:
    if not naive_glob(tool, rule.tool_pattern):
        return False
    for path, glob in rule.arg_matchers.items():
        value = naive_lookup(args, path)
        if value is MISSING:
            return False
        if not naive_glob(value if isinstance(value, str) else json.dumps(value, sort_keys=True), glob):
            return False
    return True


def reference(tool: str, args: dict[str, Any], sets: list[RuleSet] | None) -> tuple[str, int | None]:
    if sets is None:
        return "deny", None
    if not all(naive_well_formed(r) for s in sets for r in s.rules):
        return "deny", None
    contributions = []
    for position, rule_set in enumerate(sets):
        live = [r for r in rule_set.rules if r.enabled and naive_matches(r, tool, args)]
        if live:
            live.sort(key=lambda r: (r.priority, SEVERITY_ORDER.index(r.action)))  # stable: listing order
            contributions.append((SEVERITY_ORDER.index(live[0].action), position, live[0]))
    if not contributions:
        return "deny", None
    contributions.sort(key=lambda c: (c[0], c[1]))
    return contributions[0][2].action, contributions[0][2].id


# --- generation ---------------------------------------------------------------------------------

# Cheap per example: a rule is ONE draw of eight random bytes, decoded in mixed radix into its fields,
# instead of a composite of six to ten draws. Hypothesis's per-choice bookkeeping (spans, the choice
# tree) was most of the test's CPU. Bytes, not an integer: Hypothesis draws integers from a skewed
# distribution (small values first), which would starve the high digits (the defects); bytes are
# uniform, so every field keeps the odds of its own list.
PRIORITIES = [0, 1, 2, 3]  # a narrow range, so priorities tie
ENABLED = [True, True, True, False]
SINGLE_MATCHERS = [{path: glob} for path in PATHS for glob in GLOBS]
PAIR_MATCHERS = [{first: one, second: two} for first in PATHS for second in PATHS if first != second
                 for one in GLOBS for two in GLOBS]
# No matcher for half the rules; otherwise one or two, evenly (each list repeated to the pairs' size).
MATCHERS: list[dict[str, str]] = ([{}] * (2 * len(PAIR_MATCHERS))
                                  + SINGLE_MATCHERS * (len(PAIR_MATCHERS) // len(SINGLE_MATCHERS))
                                  + PAIR_MATCHERS)
FIELDS: tuple[list[Any], ...] = (PATTERNS, MATCHERS, ACTIONS, PRIORITIES, ENABLED, DEFECTS)
RULE_CODES = 1
for choices in FIELDS:
    RULE_CODES *= len(choices)


def decode_rule(code: int) -> RuleView:
    picked = []
    for choices in FIELDS:
        code, index = divmod(code, len(choices))
        picked.append(choices[index])
    pattern, arg_matchers, action, priority, is_enabled, defect = picked
    rule = RuleView(id=None, group_id=None, group_name=None, tool_pattern=pattern, arg_matchers=dict(arg_matchers),
                    action=action, priority=priority, enabled=is_enabled)
    if defect == "action":
        rule = replace(rule, action="maybe")
    elif defect == "matchers":
        rule = replace(rule, arg_matchers=list(rule.arg_matchers))  # type: ignore[arg-type]
    elif defect == "glob":
        rule = replace(rule, arg_matchers={"argv.0": 1})  # type: ignore[dict-item]
    elif defect == "priority":
        rule = replace(rule, priority="1")  # type: ignore[arg-type]
    return rule


# Strategies are built once: constructing them inside a composite re-validates them per draw.
scoped = st.sampled_from([True] * 19 + [False])


def rules() -> st.SearchStrategy[RuleView]:
    return st.binary(min_size=8, max_size=8).map(lambda raw: decode_rule(int.from_bytes(raw) % RULE_CODES))


rule_lists = st.lists(st.lists(rules(), max_size=6), min_size=1, max_size=4)


@st.composite
def scopes(draw: st.DrawFn) -> list[RuleSet] | None:
    if not draw(scoped):
        return None
    ids = iter(range(1, 100))
    return [
        RuleSet("global" if i == 0 else f"group:g{i}", tuple(replace(r, id=next(ids)) for r in set_rules))
        for i, set_rules in enumerate(draw(rule_lists))
    ]


args_strategy = st.fixed_dictionaries(
    {},
    optional={
        "path": st.sampled_from(["reports/a.md", "secrets/key", "x", ""]),
        "argv": st.lists(st.sampled_from(["uptime", "rm", "-p", "3"]), max_size=3),
        "n": st.sampled_from([3, "3", True, None, 1.5]),
        "opts": st.one_of(st.just("fast"), st.fixed_dictionaries({"mode": st.sampled_from(["fast", "slow", 3])})),
    },
)


@settings(max_examples=examples(10_000), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(tool=st.sampled_from(TOOLS), args=args_strategy, sets=scopes())
def test_the_engine_agrees_with_the_naive_reference(tool, args, sets):
    decision = check(tool, args, sets)
    event(f"{decision.action}: {'fault' if decision.faulted else decision.reason.partition(':')[0]}")
    assert (decision.action, decision.rule.id if decision.rule else None) == reference(tool, args, sets)
    if sets is not None and not decision.faulted:
        # The trace lists every rule of every set, in order, and marks one winner per deciding set.
        assert [(e.rule_set, e.rule.id) for e in decision.trace] == [(s.name, r.id) for s in sets for r in s.rules]
        winners = {e.rule_set for e in decision.trace if e.chosen}
        assert len(winners) == sum(e.chosen for e in decision.trace)
        assert (decision.rule_set in winners) if decision.rule else not winners
