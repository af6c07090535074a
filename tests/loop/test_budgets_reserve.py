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


def test_what_a_task_returns_is_read_back_only_when_the_budget_looks_spent():
    returned = {"now": 0, "reads": 0}

    def returns() -> int:
        returned["reads"] += 1
        return returned["now"]

    authority = DispatchAuthority(budget_tokens=600, spent_tokens=120, returns=returns)
    assert authority.reserve(480) == 480
    assert authority.exceeded and returned["reads"] == 1
    returned["now"] = 360  # the task ended having spent 120
    authority.admit()
    assert (authority.returned_tokens, authority.exceeded) == (360, False)
    reads = returned["reads"]
    authority.settle(60, 60)
    authority.admit()  # 240 of 600 spent: nothing to read back
    assert returned["reads"] == reads
    assert authority.reserve(None) == 240  # what remains, returns included
