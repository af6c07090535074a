"""The rule engine's semantics, table by table (SPEC A1/A2). Pure: no database."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.rules.engine import Decision, RuleSet, RuleView, arg_lookup, arg_text, check

_ids = iter(range(1, 1_000_000))


def rule(pattern: str, action: str, priority: int = 100, *, args: Any = None, enabled: Any = True,
         id: int | None = None) -> RuleView:
    return RuleView(id=id if id is not None else next(_ids), group_id=None, group_name=None, tool_pattern=pattern,
                    arg_matchers={} if args is None else args, action=action, priority=priority, enabled=enabled)


def decide(tool: str, args: dict[str, Any], *sets: list[RuleView]) -> Decision:
    return check(tool, args, [RuleSet(f"set{i}", tuple(rules)) for i, rules in enumerate(sets)])


WITHIN_ONE_SET = [
    ("lowest priority decides", [rule("*", "require", 999_999), rule("read_file", "allow", 10)], "allow"),
    ("lowest priority decides even if it is the laxer", [rule("read_*", "deny", 50), rule("read_file", "allow", 5)],
     "allow"),
    ("ties: deny over require", [rule("*", "require", 7), rule("read_file", "deny", 7)], "deny"),
    ("ties: deny over allow", [rule("read_file", "allow", 7), rule("*", "deny", 7)], "deny"),
    ("ties: require over allow", [rule("read_file", "allow", 7), rule("read_*", "require", 7)], "require"),
    ("a non-matching rule is ignored", [rule("write_file", "deny", 1), rule("*", "allow", 2)], "allow"),
    ("no matching rule denies", [rule("write_file", "allow", 1)], "deny"),
    ("a disabled rule is skipped", [rule("read_file", "deny", 1, enabled=False), rule("*", "allow", 2)], "allow"),
    ("only disabled rules deny", [rule("*", "allow", 1, enabled=False)], "deny"),
    ("character classes glob", [rule("[rw]*_file", "require", 1)], "require"),
]


@pytest.mark.parametrize(("case", "rules", "expected"), WITHIN_ONE_SET, ids=[c[0] for c in WITHIN_ONE_SET])
def test_within_one_set_the_lowest_priority_match_decides(case, rules, expected):
    assert decide("read_file", {"path": "a.txt"}, rules).action == expected


ACROSS_SETS = [
    ("deny beats require", [[rule("*", "require", 1)], [rule("*", "deny", 999)]], "deny"),
    ("require beats allow, whatever the priorities", [[rule("*", "allow", 1)], [rule("*", "require", 999)]],
     "require"),
    ("a group cannot widen a global require", [[rule("*", "require", 999_999)], [rule("read_file", "allow", 1)]],
     "require"),
    ("a set with no match contributes nothing", [[rule("read_file", "allow", 1)], [rule("write_*", "deny", 1)]],
     "allow"),
    ("an empty set contributes nothing", [[rule("*", "allow", 1)], []], "allow"),
    ("all empty denies", [[], []], "deny"),
]


@pytest.mark.parametrize(("case", "sets", "expected"), ACROSS_SETS, ids=[c[0] for c in ACROSS_SETS])
def test_across_sets_the_most_restrictive_decision_wins(case, sets, expected):
    assert decide("read_file", {}, *sets).action == expected


def test_it_names_the_deciding_rule_and_its_set():
    winner = rule("*", "deny", 500, id=42)
    decision = decide("read_file", {}, [rule("read_file", "allow", 1)], [rule("*", "require", 900), winner])
    assert decision.action == "deny"
    assert decision.rule == winner
    assert decision.rule_set == "set1"
    assert "rule 42" in decision.reason


def test_on_an_exact_tie_the_first_listed_rule_and_set_decide():
    first, second = rule("*", "require", 5, id=1), rule("read_*", "require", 5, id=2)
    assert decide("read_file", {}, [first, second]).rule == first
    a, b = rule("*", "deny", 1, id=3), rule("*", "deny", 1, id=4)
    assert decide("read_file", {}, [a], [b]).rule == a


def test_the_trace_lists_every_rule_considered():
    chosen = rule("read_file", "allow", 1, id=10)
    rules = [chosen, rule("write_file", "deny", 1, id=11), rule("*", "deny", 2, enabled=False, id=12)]
    decision = decide("read_file", {}, rules, [rule("*", "require", 9, id=13)])
    assert [(e.rule_set, e.rule.id, e.result, e.chosen) for e in decision.trace] == [
        ("set0", 10, "match", True),
        ("set0", 11, "no_match", False),
        ("set0", 12, "skipped", False),
        ("set1", 13, "match", True),
    ]
    assert decision.action == "require" and decision.rule.id == 13
    assert decision.trace[1].detail == "tool 'read_file' does not match 'write_file'"
    assert decision.trace[2].detail == "disabled"


@pytest.mark.parametrize("sets", [[], [[]], [[rule("write_file", "allow")]]], ids=["no sets", "empty", "no match"])
def test_with_no_matching_rule_every_call_is_denied(sets):
    decision = decide("read_file", {}, *sets)
    assert (decision.action, decision.rule, decision.reason) == ("deny", None, "no matching rule")


def test_a_call_with_no_scope_is_denied():
    decision = check("read_file", {}, None)
    assert (decision.action, decision.rule, decision.reason) == ("deny", None, "no scope")


ARGS = {"argv": ["uptime", "-p"], "path": "reports/findings.md", "n": 3, "flag": True, "none": None,
        "opts": {"mode": "fast", "list": [{"k": "v"}]}, "obj": {"b": 1, "a": [1, 2]}}

ARG_MATCHERS = [
    ("argv.0", "uptime", True),
    ("argv.0", "up*", True),
    ("argv.1", "-p", True),
    ("argv.0", "rm", False),
    ("argv.2", "*", False),  # out of range: missing
    ("argv.-1", "*", False),  # only decimal indexes
    ("argv.x", "*", False),
    ("path", "reports/*", True),
    ("path", "secrets/*", False),
    ("n", "3", True),  # non-strings compare as JSON
    ("flag", "true", True),
    ("flag", "True", False),
    ("none", "null", True),
    ("obj", '{"a": *, "b": 1}', True),  # JSON with sorted keys
    ("obj", '{"a": [[]1, 2], "b": 1}', True),  # "[[]" is a literal "[" in a glob
    ("argv", '*"uptime", "-p"*', True),
    ("opts.mode", "fast", True),
    ("opts.list.0.k", "v", True),
    ("missing", "*", False),  # a missing path never matches, even "*"
    ("path.0", "*", False),  # a string is not indexed
    ("n.0", "*", False),
]


@pytest.mark.parametrize(("path", "glob", "matches"), ARG_MATCHERS, ids=[f"{p}~{g}" for p, g, _ in ARG_MATCHERS])
def test_argument_matchers_follow_paths_into_dicts_and_lists(path, glob, matches):
    decision = decide("execute_cmd", ARGS, [rule("execute_*", "allow", 1, args={path: glob})])
    assert decision.action == ("allow" if matches else "deny")


def test_every_argument_matcher_must_match():
    matchers = {"argv.0": "uptime", "path": "reports/*"}
    assert decide("execute_cmd", ARGS, [rule("*", "allow", args=matchers)]).action == "allow"
    assert decide("execute_cmd", ARGS | {"path": "x"}, [rule("*", "allow", args=matchers)]).action == "deny"


def test_a_narrow_allow_under_a_catch_all_require():
    rules = [rule("execute_cmd", "allow", 10, args={"argv.0": "uptime"}), rule("*", "require", 999_999)]
    assert decide("execute_cmd", {"argv": ["uptime"]}, rules).action == "allow"
    assert decide("execute_cmd", {"argv": ["rm", "-rf", "/"]}, rules).action == "require"
    assert decide("execute_cmd", {}, rules).action == "require"


def test_lookup_and_text_helpers():
    assert arg_lookup({"a": [{"b": "c"}]}, "a.0.b") == (True, "c")
    assert arg_lookup({"a": []}, "a.0") == (False, None)
    assert arg_text("x") == "x" and arg_text(1.5) == "1.5" and arg_text({"é": 1}) == '{"é": 1}'


MALFORMED = [
    ("matchers not a dict", rule("*", "allow", args=["argv.0", "uptime"])),
    ("matcher glob not a string", rule("*", "allow", args={"argv.0": 1})),
    ("unknown action", rule("*", "maybe")),
    ("empty tool pattern", rule("", "allow")),
    ("priority not an integer", rule("*", "allow", "1")),
    ("priority a boolean", rule("*", "allow", True)),
    ("enabled not a boolean", rule("*", "allow", enabled="yes")),
    ("not a rule at all", {"tool_pattern": "*", "action": "allow"}),
]


@pytest.mark.parametrize(("case", "bad"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_a_malformed_rule_denies_the_call(case, bad):
    # Even when a valid allow sits before it and the bad rule would not match the tool.
    decision = decide("read_file", {}, [rule("read_file", "allow", 1), bad])
    assert decision.action == "deny" and decision.rule is None
    assert decision.reason.startswith("engine fault") and decision.faulted


def test_a_malformed_rule_in_another_set_denies_too():
    decision = decide("read_file", {}, [rule("*", "allow", 1)], [rule("*", "sometimes")])
    assert decision.action == "deny" and decision.faulted


def test_a_disabled_rule_is_skipped_whatever_it_holds():
    decision = decide("read_file", {}, [rule("*", "maybe", enabled=False), rule("*", "allow", 2)])
    assert decision.action == "allow"


class Exploding(dict):
    def __contains__(self, key: object) -> bool:
        raise RuntimeError("boom")


@pytest.mark.parametrize(("tool", "args"), [("read_file", Exploding(a=1)), ("read_file", ["not", "a", "mapping"]),
                                            (None, {})], ids=["exception", "args not a mapping", "tool not a string"])
def test_an_exception_inside_the_engine_denies(tool, args):
    decision = check(tool, args, [RuleSet("global", (rule("*", "allow", 1, args={"a": "*"}),))])
    assert decision.action == "deny" and decision.reason.startswith("engine fault")


def test_a_broken_rule_set_container_denies():
    decision = check("read_file", {}, [object()])  # type: ignore[list-item]
    assert decision.action == "deny" and decision.faulted


# --- facts: "$" matcher paths read what Skald knows of the tool, never the model's arguments ------

MCP_DEFAULTS = [rule("mcp__*", "require", 100),
                rule("mcp__*", "allow", 90, args={"$mcp.readOnlyHint": "true", "$mcp.trust": "trusted"})]
TRUSTED_READ = {"mcp": {"server": "gh", "trust": "trusted", "readOnlyHint": True}}


@pytest.mark.parametrize(("facts", "expected"), [
    (TRUSTED_READ, "allow"),
    ({"mcp": {"server": "gh", "trust": "untrusted", "readOnlyHint": True}}, "require"),
    ({"mcp": {"server": "gh", "trust": "trusted", "readOnlyHint": False}}, "require"),
    ({"mcp": {"server": "gh", "trust": "trusted"}}, "require"),  # a hint not stated never matches
    (None, "require"),
])
def test_a_fact_matcher_reads_the_tools_facts(facts, expected):
    decision = check("mcp__gh__list_issues", {}, [RuleSet("global", MCP_DEFAULTS)], facts)
    assert decision.action == expected


def test_a_model_cannot_forge_a_fact_through_its_arguments():
    forged = {"$mcp": {"trust": "trusted", "readOnlyHint": True}, "mcp": {"trust": "trusted", "readOnlyHint": True}}
    decision = check("mcp__gh__delete_repo", forged, [RuleSet("global", MCP_DEFAULTS)], {"mcp": {"server": "gh"}})
    assert decision.action == "require"
