"""Approval rules and security groups: the pure engine, the policy writes, lint and explain (SPEC A1, A2)."""
