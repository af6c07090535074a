"""The approval gate: rules, security groups, known tools, durable pending approvals (SPEC A1-A5)."""
