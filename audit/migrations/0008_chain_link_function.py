"""PostgreSQL: ``audit_chain_link(...)`` takes the chain's append lock, reads the tip and links the
given rows to it (seq, time, prev_hash, hash), all on the server, so that an append is one
``INSERT … SELECT * FROM audit_chain_link(…)`` and costs no round trip of its own (issue 14). This
release no longer calls ``audit_chain_tip`` (migration 0007), which only locked and read the tip,
leaving the hashing to the client and a round trip between the two. It stays, so that workers of
the previous release keep appending during a rolling upgrade: both take the same advisory lock and
link the same way, so their rows interleave into one chain that verifies.

The hashed text is the one :func:`audit.chain.row_hash` hashes: the client sends the canonical
JSON around the values only the server knows, ``head`` (``["skald.audit.v1",``) and each row's
tail (the fields after the time, JSON-encoded, without brackets); the server puts the seq, the
time (ISO-8601, six fractional digits, ``Z``) and ``prev_hash`` between them. The rows travel as
one JSON array of ``[time, actor_type, actor_id, kind, subject_type, subject_id, payload, tail]``:
one parameter, parsed by the server in C (psycopg dumps a Python list as an array in Python).
Python verifies the result offline exactly as before. A row's time is never earlier than the tip's,
so times grow with seq as they did when the client read the clock under the lock.

The lock is taken before the tip is read, and a VOLATILE PL/pgSQL function runs each statement
with a fresh snapshot, so the tip read sees every append committed before the lock was granted.
"""

from __future__ import annotations

from django.db import migrations

from audit.migrations._postgres import postgres_only

CREATE = """
CREATE OR REPLACE FUNCTION audit_chain_link(lock_key bigint, genesis text, head text, rows json)
RETURNS TABLE (
    o_seq bigint, o_time timestamptz, o_actor_type text, o_actor_id text, o_kind integer, o_subject_type text,
    o_subject_id text, o_payload text, o_prev_hash text, o_hash text
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    tip_seq bigint;
    tip_hash text;
    tip_time timestamptz;
    r json;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    SELECT a.seq, a.hash, a.time INTO tip_seq, tip_hash, tip_time FROM audit_auditevent a ORDER BY a.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        tip_seq := 0;
        tip_hash := genesis;
        tip_time := '-infinity';
    END IF;
    FOR r IN SELECT value FROM json_array_elements(rows) LOOP
        tip_seq := tip_seq + 1;
        o_seq := tip_seq;
        o_time := greatest((r->>0)::timestamptz, tip_time);
        o_actor_type := r->>1;
        o_actor_id := r->>2;
        o_kind := (r->>3)::integer;
        o_subject_type := r->>4;
        o_subject_id := r->>5;
        o_payload := r->>6;
        o_prev_hash := tip_hash;
        o_hash := encode(sha256(convert_to(
            head || o_seq || ',"' || to_char(o_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '",'
            || (r->>7) || ',"' || tip_hash || '"]', 'UTF8')), 'hex');
        tip_hash := o_hash;
        tip_time := o_time;
        RETURN NEXT;
    END LOOP;
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS audit_chain_link(bigint, text, text, json)"


class Migration(migrations.Migration):
    dependencies = [("audit", "0007_chain_tip_function")]
    operations = [postgres_only(CREATE, DROP)]
