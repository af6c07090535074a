"""Never-wins and shadowed rules of a document, named by their paths (pure; the rules lint's own checks)."""

from __future__ import annotations

from dataclasses import dataclass

from approvals.policy_doc.document import PolicyDoc, RuleDoc
from approvals.rules.engine import RuleSet, RuleView
from approvals.rules.lint import rule_warnings
from approvals.rules.selectors import GLOBAL_SET, group_set_name


@dataclass(frozen=True, slots=True)
class Warning:
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


def rule_paths(doc: PolicyDoc) -> list[tuple[str, str | None, int, RuleDoc]]:
    """(path, group name, group number, rule) for every rule; the parsed path when there is one."""
    found: list[tuple[str, str | None, int, RuleDoc]] = [
        (rule.path or f"rules[{i}]", None, 0, rule) for i, rule in enumerate(doc.rules)]
    for g, group in enumerate(doc.groups):
        found += [(rule.path or f"groups[{g}].rules[{i}]", group.name, g + 1, rule)
                  for i, rule in enumerate(group.rules)]
    return found


def document_warnings(doc: PolicyDoc) -> list[Warning]:
    """Rules of ``doc`` that can never decide a call (see :mod:`approvals.rules.lint`)."""
    entries = rule_paths(doc)
    # Numbered views: the lint tells rules apart by id. The numbers are replaced by paths below.
    views: dict[int, tuple[str, RuleView]] = {}
    sets: dict[str | None, list[RuleView]] = {None: []}
    for number, (path, group, group_number, rule) in enumerate(entries, start=1):
        view = RuleView(id=number, group_id=group_number or None, group_name=group, tool_pattern=rule.tool,
                        arg_matchers=dict(rule.args), action=rule.action, priority=rule.priority,
                        enabled=rule.enabled)
        views[number] = (path, view)
        sets.setdefault(group, []).append(view)
    rule_sets = [RuleSet(GLOBAL_SET if name is None else group_set_name(name), tuple(rules))
                 for name, rules in sets.items()]
    warnings: list[Warning] = []
    for path, view in views.values():
        for message in rule_warnings(view, rule_sets, global_set=GLOBAL_SET):
            for number, (other_path, _) in views.items():
                message = message.replace(f"rule #{number} (", f"rule {other_path} (")
            warnings.append(Warning(path, message))
    return warnings
