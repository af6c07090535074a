"""Reservations from the tree's one ledger (SPEC L15, issue 27 §2): what a frame spawned to run later
may spend is charged to the root's ledger at spawn, capped at what remains."""

from __future__ import annotations

from loop.budgets import DispatchAuthority


def test_a_reservation_is_capped_at_what_remains_and_charged_at_once():
    ledger = DispatchAuthority(budget_tokens=600, spent_tokens=120)
    assert ledger.reserve(240) == 240 and ledger.spent_tokens == 360
    assert ledger.reserve(None) == 240 and ledger.exceeded  # no bound of its own: all that is left
    assert ledger.reserve(100) == 0  # nothing left: nothing reserved


def test_a_ledger_without_a_budget_reserves_nothing():
    ledger = DispatchAuthority(budget_tokens=None, spent_tokens=50)
    assert ledger.reserve(240) == 240 and ledger.spent_tokens == 50
    assert ledger.reserve(None) is None
