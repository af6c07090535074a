"""Policy as code (issue 32): the governance configuration as one YAML document.

Rooms: ``document`` (the typed document, its canonical YAML and digest), ``parse`` (raw YAML data →
document, every problem named by its path), ``schema.json`` + ``schema`` (the published JSON
Schema), ``live`` (the live configuration as a document), ``diff`` (what would change), ``plan``
(the diff in words and JSON, lint warnings, the impact preview), ``apply`` (one transaction through
the admin's services, one audit row naming the digest), ``impact`` (the pure, batched re-decision of
recorded gate decisions) and ``history`` (those recorded decisions, read from the audit log).
"""
