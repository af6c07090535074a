"""The append-only, hash-chained audit log (SPEC U1, U2)."""
