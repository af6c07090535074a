"""The pure chain: canonical bytes, hashes, signatures and verification (no database)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit import chain
from tests.audit.forge import ROW_COLUMNS, chain_rows, changed
from tests.strength import examples

KEY = "audit-key-for-tests"


@dataclass(frozen=True)
class Row:
    seq: int
    time: datetime
    actor_type: str
    actor_id: str
    kind: int
    subject_type: str
    subject_id: str
    payload: str
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class Head:
    seq: int
    hash: str
    recorded_at: datetime | str
    signature: str | None = None


def build(n: int) -> list[Row]:
    return [Row(**fields) for fields in chain_rows(n)]


CHAIN = build(200)
HEAD_AT_END = [Head(200, CHAIN[-1].hash, CHAIN[-1].time)]


def verify(rows: list[Row], heads: list[Head] = HEAD_AT_END, **kw: object) -> chain.VerifyReport:
    # The database hands rows over ordered by seq; so does every mutation below.
    return chain.verify_rows(sorted(rows, key=lambda r: r.seq), heads, **kw)  # type: ignore[arg-type]


# --- what an attacker does to rows ordered by seq -----------------------------------------------


def edit(rows: list[Row], index: int, column: str) -> list[Row]:
    out = list(rows)
    out[index] = dataclasses.replace(out[index], **{column: changed(column, getattr(out[index], column))})
    return out


def delete(rows: list[Row], index: int) -> list[Row]:
    return rows[:index] + rows[index + 1 :]


def swap(rows: list[Row], index: int) -> list[Row]:
    a, b = rows[index], rows[index + 1]
    return [*rows[:index], dataclasses.replace(b, seq=a.seq), dataclasses.replace(a, seq=b.seq), *rows[index + 2 :]]


def forge_insert(rows: list[Row], index: int) -> list[Row]:
    """A row made to look valid: right seq, linked to its predecessor, hash recomputed; the rows
    after it are renumbered, but their hashes cannot follow without rewriting the whole tail."""
    prev_hash = rows[index - 1].hash if index else chain.GENESIS
    fields = {**dataclasses.asdict(rows[index]), "payload": '{"forged":true}', "prev_hash": prev_hash}
    del fields["hash"]
    forged = Row(**fields, hash=chain.row_hash(**fields))
    return rows[:index] + [forged] + [dataclasses.replace(r, seq=r.seq + 1) for r in rows[index:]]


def rehash_from(rows: list[Row], index: int) -> list[Row]:
    """The strongest attacker: edits a row and recomputes every hash after it."""
    out, prev = list(rows[:index]), rows[index - 1].hash if index else chain.GENESIS
    for position, row in enumerate(rows[index:]):
        fields = dataclasses.asdict(row)
        del fields["hash"]
        fields["prev_hash"] = prev
        if position == 0:
            fields["payload"] = '{"rewritten":true}'
        out.append(Row(**fields, hash=chain.row_hash(**fields)))
        prev = out[-1].hash
    return out


# --- canonical JSON -----------------------------------------------------------------------------


def test_canonical_json_sorts_keys_drops_spaces_and_keeps_unicode():
    value = {"b": [1, 2.5, None, True], "a": {"z": "Grüße ✓", "y": ()}}
    assert chain.canonical_json(value) == '{"a":{"y":[],"z":"Grüße ✓"},"b":[1,2.5,null,true]}'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_canonical_json_refuses_nan_and_infinity(bad):
    with pytest.raises(ValueError, match=r"\$\.x\[0\]"):
        chain.canonical_json({"x": [bad]})


@pytest.mark.parametrize(
    "bad", [datetime(2026, 1, 1, tzinfo=UTC), date(2026, 1, 1), Decimal("1.5"), {1, 2}, b"x", object()]
)
def test_canonical_json_refuses_values_that_are_not_json(bad):
    with pytest.raises(TypeError, match="not a JSON type"):
        chain.canonical_json({"deep": {"value": bad}})


@pytest.mark.parametrize("key", [1, None, 1.5, ("a",)])
def test_canonical_json_refuses_keys_that_are_not_strings(key):
    # json.dumps would quietly write {1: …} as {"1": …}: two payloads, one hash.
    with pytest.raises(TypeError, match="object key"):
        chain.canonical_json({key: "v"})


def test_canonical_json_refuses_a_lone_surrogate():
    with pytest.raises(ValueError, match="not valid Unicode"):
        chain.canonical_json({"s": "\ud800"})


def test_format_time_is_utc_with_six_fractional_digits():
    cest = timezone(timedelta(hours=2))
    assert chain.format_time(datetime(2026, 1, 2, 5, 4, 5, tzinfo=cest)) == "2026-01-02T03:04:05.000000Z"
    with pytest.raises(ValueError, match="timezone-aware"):
        chain.format_time(datetime(2026, 1, 2))


# --- hashes -------------------------------------------------------------------------------------

GOLDEN = {
    "seq": 1,
    "time": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    "actor_type": "user",
    "actor_id": "42",
    "kind": 510,
    "subject_type": "skald.run",
    "subject_id": "7",
    "payload": '{"n":1.5,"ticket":"Drucker offline ✓"}',
    "prev_hash": chain.GENESIS,
}


def test_row_hash_is_sha256_of_a_versioned_canonical_array():
    # Pinned: changing the hashed layout silently would make every stored chain fail verification.
    hashed = (
        '["skald.audit.v1",1,"2026-01-02T03:04:05.000006Z","user","42",510,"skald.run","7",'
        '"{\\"n\\":1.5,\\"ticket\\":\\"Drucker offline ✓\\"}","' + "0" * 64 + '"]'
    )
    expected = hashlib.sha256(hashed.encode("utf-8")).hexdigest()
    assert chain.row_hash(**GOLDEN) == expected
    assert expected == "eb00c1583b6c4ad913367331ffd0a4a1da998df5cdd3bec3708d04fbbcee944c"


@pytest.mark.parametrize("column", [c for c in ROW_COLUMNS if c != "hash"])
def test_row_hash_covers_every_field(column):
    assert chain.row_hash(**{**GOLDEN, column: changed(column, GOLDEN[column])}) != chain.row_hash(**GOLDEN)


def test_head_signature_is_an_hmac_over_seq_hash_and_time():
    when = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    signature = chain.head_signature(KEY, seq=3, hash="a" * 64, recorded_at=when)
    assert signature == chain.head_signature(KEY.encode(), seq=3, hash="a" * 64, recorded_at=chain.format_time(when))
    assert signature != chain.head_signature(KEY, seq=4, hash="a" * 64, recorded_at=when)
    assert signature != chain.head_signature("other", seq=3, hash="a" * 64, recorded_at=when)


# --- verification: no false positives -----------------------------------------------------------


def test_it_accepts_an_empty_chain():
    assert chain.verify_rows([], []) == chain.VerifyReport(ok=True, rows=0)


def test_it_accepts_an_intact_chain_and_reports_its_tip():
    report = verify(CHAIN)
    assert report == chain.VerifyReport(True, 200, None, None, 200, CHAIN[-1].hash)


def test_it_accepts_valid_signed_heads_and_unsigned_ones_only_without_a_key():
    signed = Head(100, CHAIN[99].hash, CHAIN[99].time)
    signed = dataclasses.replace(
        signed, signature=chain.head_signature(KEY, seq=100, hash=signed.hash, recorded_at=signed.recorded_at)
    )
    assert verify(CHAIN, [signed], key=KEY).ok
    unsigned = Head(150, CHAIN[149].hash, CHAIN[149].time)
    assert verify(CHAIN, [signed, unsigned], key=None).ok  # no key: signatures cannot be checked, not failed


def test_with_a_key_an_unsigned_head_fails_naming_it():
    """Blanking the signatures is how a rewritten chain's new heads would pass: with a key set, an
    unsigned head is a broken chain, in the database or in an exported file."""
    unsigned = Head(150, CHAIN[149].hash, CHAIN[149].time)
    report = verify(CHAIN, [unsigned], key=KEY)
    assert (report.ok, report.first_bad_seq) == (False, 150)
    assert report.reason == "recorded head #150 is unsigned while SKALD_AUDIT_KEY is set"
    exported = chain.ExportedHead(seq=150, hash=CHAIN[149].hash, recorded_at="x", signature=None)
    report = verify(CHAIN, [exported], key=KEY)
    assert report.reason == "exported head #150 is unsigned while SKALD_AUDIT_KEY is set"


def test_it_reads_rows_lazily_and_stops_at_the_first_bad_one():
    broken = edit(CHAIN, 9, "payload")

    def rows() -> Iterator[Row]:
        yield from broken[:10]
        raise AssertionError("read past the first bad row")

    report = chain.verify_rows(rows(), [])  # a generator: no len(), no list()
    assert (report.ok, report.rows, report.first_bad_seq, report.tip_seq) == (False, 10, 10, 9)


# --- verification: every single-row attack on a 200-row chain -----------------------------------


@pytest.mark.parametrize("column", ROW_COLUMNS)
def test_it_detects_an_edit_of_any_field_of_any_row(column):
    for index in range(200):
        report = verify(edit(CHAIN, index, column))
        assert not report.ok and report.first_bad_seq == index + 1, (column, index, report)


def test_it_detects_the_deletion_of_any_row():
    for index in range(200):
        report = verify(delete(CHAIN, index))
        assert not report.ok and report.first_bad_seq == index + 1, (index, report)
    assert "missing" in verify(delete(CHAIN, 41)).reason


def test_it_detects_any_adjacent_swap():
    for index in range(199):
        report = verify(swap(CHAIN, index))
        assert not report.ok and report.first_bad_seq == index + 1, (index, report)


def test_it_detects_a_forged_insert_anywhere_before_the_tip():
    for index in range(199):
        report = verify(forge_insert(CHAIN, index))
        # The forged row itself links and hashes correctly; its successor cannot.
        assert not report.ok and report.first_bad_seq == index + 2, (index, report)
        assert report.tip_seq == index + 1
    # Forged into seq 200, it takes the place of the recorded head: caught on the spot.
    report = verify(forge_insert(CHAIN, 199))
    assert (report.first_bad_seq, report.reason) == (200, "row differs from the head recorded at seq 200")


def test_it_detects_a_repeated_seq():
    report = verify([*CHAIN[:50], CHAIN[49], *CHAIN[50:]])
    assert (report.first_bad_seq, report.reason) == (51, "seq 50 appears where seq 51 belongs")


def test_it_detects_a_tail_truncated_behind_the_recorded_head():
    for kept in (0, 1, 100, 199):
        report = verify(CHAIN[:kept])
        assert not report.ok and report.first_bad_seq == kept + 1
        assert report.reason == f"chain ends at seq {kept}, behind the head recorded at seq 200"


def test_it_detects_a_rewritten_tail_against_a_recorded_head():
    heads = [Head(150, CHAIN[149].hash, CHAIN[149].time)]
    report = verify(rehash_from(CHAIN, 99), heads)
    assert (report.ok, report.first_bad_seq) == (False, 150)
    assert report.reason == "row differs from the head recorded at seq 150"


def test_what_a_chain_alone_cannot_see_past_its_last_head():
    # Honest limits: after the last recorded head, a consistently rewritten or cut tail looks
    # like a genuine one. Recording (and exporting) heads often is what bounds this window.
    heads = [Head(150, CHAIN[149].hash, CHAIN[149].time)]
    assert verify(rehash_from(CHAIN, 150), heads).ok
    assert verify(CHAIN[:160], heads).ok


def test_it_detects_a_forged_or_impossible_head():
    forged = Head(200, CHAIN[-1].hash, CHAIN[-1].time, signature="f" * 64)
    report = verify(CHAIN, [forged], key=KEY)
    assert (report.ok, report.first_bad_seq) == (False, 200)
    assert "invalid signature" in report.reason
    assert not verify(CHAIN, [Head(0, chain.GENESIS, CHAIN[0].time)]).ok


def test_an_exported_head_parses_and_refuses_malformed_input():
    head = chain.ExportedHead.parse({"seq": 3, "hash": "a" * 64, "recorded_at": "x", "signature": None})
    assert head == chain.ExportedHead(3, "a" * 64, "x", None)
    for bad in ({"seq": True, "hash": "a" * 64, "recorded_at": "x"}, {"seq": 1, "hash": "a", "recorded_at": "x"},
                {"seq": 1, "hash": "a" * 64}, {"seq": 1, "hash": "a" * 64, "recorded_at": "x", "signature": 5}):
        with pytest.raises(ValueError, match="exported head"):
            chain.ExportedHead.parse(bad)


# --- random attack sequences --------------------------------------------------------------------

SMALL = build(40)
SMALL_HEADS = [Head(40, SMALL[-1].hash, SMALL[-1].time)]

mutation = st.one_of(
    st.tuples(st.just("edit"), st.integers(0, 10_000), st.sampled_from(ROW_COLUMNS)),
    st.tuples(st.sampled_from(["delete", "swap", "insert", "truncate"]), st.integers(0, 10_000), st.none()),
)


def apply(rows: list[Row], op: str, at: int, column: str | None) -> list[Row]:
    """One attack at position ``at`` (modulo the length); skipped when the database would refuse it."""
    if not rows:
        return rows
    index = at % len(rows)
    if op == "edit":
        assert column is not None
        out = edit(rows, index, column)
        if column == "seq" and len({r.seq for r in out}) < len(out):
            return rows  # the unique index refuses a duplicate seq
        return sorted(out, key=lambda r: r.seq)
    if op == "delete":
        return delete(rows, index)
    if op == "swap":
        return swap(rows, index) if index + 1 < len(rows) else rows
    if op == "insert":
        return forge_insert(rows, index)
    return rows[:index]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=6))
def test_any_sequence_of_attacks_that_changes_the_chain_is_detected(mutations):
    rows = SMALL
    for op, at, column in mutations:
        rows = apply(rows, op, at, column)
    report = verify(rows, SMALL_HEADS)
    assert report.ok == (rows == SMALL), (mutations, report)
