"""Benchmarks behind ``make bench``: the kernel's per-turn overhead on SQLite and PostgreSQL.

``python -m bench`` runs :mod:`bench.kernel` once per database in a fresh process and prints a
table; ``python -m bench.profile_turn`` shows where a turn's time goes. See ``bench/README.md``.
"""
