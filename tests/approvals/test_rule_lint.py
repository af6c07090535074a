"""Rules that can never win are named, and only those (pure, over engine values)."""

from __future__ import annotations

from approvals.rules.engine import RuleSet, RuleView
from approvals.rules.lint import rule_warnings


def rule(rid: int, pattern: str, action: str, priority: int, *, group: int | None = None,
         matchers: dict[str, str] | None = None, enabled: bool = True) -> RuleView:
    return RuleView(id=rid, group_id=group, group_name=f"g{group}" if group else None, tool_pattern=pattern,
                    arg_matchers=matchers or {}, action=action, priority=priority, enabled=enabled)


CATCH_ALL = rule(99, "*", "require", 999_999)


def test_it_names_a_rule_shadowed_by_an_earlier_unconditional_rule_of_its_set() -> None:
    first, later = rule(1, "write_file", "require", 100), rule(2, "write_file", "allow", 200)
    sets = [RuleSet("global", (first, later, CATCH_ALL))]
    [warning] = rule_warnings(later, sets)
    assert warning.startswith("Never wins: rule #1")
    assert rule_warnings(first, sets) == [] and rule_warnings(CATCH_ALL, sets) == []


def test_a_conditional_earlier_rule_does_not_shadow() -> None:
    first = rule(1, "write_file", "allow", 100, matchers={"path": "reports/*"})
    later = rule(2, "write_file", "require", 200)
    assert rule_warnings(later, [RuleSet("global", (first, later))]) == []


def test_it_names_a_group_allow_that_a_stricter_global_rule_overrules() -> None:
    global_rule = rule(1, "write_file", "require", 100)
    group_allow = rule(2, "write_file", "allow", 10, group=7)
    sets = [RuleSet("global", (global_rule, CATCH_ALL)), RuleSet("group:g7", (group_allow,))]
    [warning] = rule_warnings(group_allow, sets)
    assert "Never takes effect: the global rule #1" in warning
    group_deny = rule(3, "write_file", "deny", 10, group=7)  # tightening is what groups are for
    assert rule_warnings(group_deny, [sets[0], RuleSet("group:g7", (group_deny,))]) == []


def test_a_disabled_rule_gets_no_warning() -> None:
    first, later = rule(1, "*", "deny", 1), rule(2, "read_logs", "allow", 100, enabled=False)
    assert rule_warnings(later, [RuleSet("global", (first, later))]) == []
