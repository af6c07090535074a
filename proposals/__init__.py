"""Proposals captured when runs resolve, the review queue, and accepted knowledge (SPEC Q1, Q2)."""
