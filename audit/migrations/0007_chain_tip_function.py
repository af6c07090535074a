"""PostgreSQL: ``audit_chain_tip(lock_key)`` takes the chain's append lock and reads the tip in one
statement (issue 14).

One SQL statement cannot do both: its snapshot is taken before the lock is granted, so it could
read a tip that a writer it waited for has since extended. A VOLATILE PL/pgSQL function runs each
of its statements with a fresh snapshot, so the SELECT inside sees every append committed before
the lock was granted. SQLite needs nothing: its transactions take the write lock at BEGIN.
"""

from __future__ import annotations

from django.db import migrations

from audit.migrations._postgres import postgres_only

CREATE = """
CREATE OR REPLACE FUNCTION audit_chain_tip(lock_key bigint) RETURNS TABLE (tip_seq bigint, tip_hash varchar)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    RETURN QUERY SELECT seq::bigint, hash::varchar FROM audit_auditevent ORDER BY seq DESC LIMIT 1;
END
$$
"""
DROP = "DROP FUNCTION IF EXISTS audit_chain_tip(bigint)"


class Migration(migrations.Migration):
    dependencies = [("audit", "0006_compaction_and_hook_error_kinds")]
    operations = [postgres_only(CREATE, DROP)]
