"""Credential tripwire policy: organisation patterns and allow-list entries (SPEC L16)."""
