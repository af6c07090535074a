"""Durable approvals: parked calls, their resolution and the approver's queue (SPEC A3, A4)."""
