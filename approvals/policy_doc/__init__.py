"""Policy as code (issue 32): the governance configuration as one YAML document.

Rooms: ``document`` (the typed document, its canonical YAML and digest), ``parse`` (raw YAML data →
document, every problem named by its path), ``schema.json`` + ``schema`` (the published JSON
Schema), ``live`` (the live configuration as a document), ``members`` (users and agents a document
names, checked against the database), ``diff`` (what would change), ``lint`` (never-wins and
shadowed rules by path), ``plan`` (the diff in words and JSON, the warnings, the impact preview),
``apply`` (one transaction through the admin's services, one audit row naming the digest),
``export``, ``impact`` (the pure, batched re-decision of recorded gate decisions), ``history``
(those recorded decisions, read from the audit log) and ``rule_preview`` (one rule edit's impact,
for the admin's rule page). See docs/policy.md.
"""
