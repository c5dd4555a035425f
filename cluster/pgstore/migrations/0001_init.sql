-- MusePi cluster state, version 1. See docs/cluster.md.

-- Nodes (store instances) and their leases: a session held by a node whose
-- lease has run out may be taken over.
CREATE TABLE musepi_nodes (
    node        text PRIMARY KEY,          -- name#incarnation
    lease_until timestamptz NOT NULL
);

-- One row per session: its current activation epoch and who holds it.
CREATE TABLE musepi_sessions (
    session_id text PRIMARY KEY,
    epoch      bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    owner      text NOT NULL DEFAULT '',   -- the node that took epoch
    held       boolean NOT NULL DEFAULT false, -- an open Log holds it
    taken_at   timestamptz NOT NULL DEFAULT now()
);

-- musepi_fence(session, epoch) locks the session's row in share mode, so a
-- takeover waits for the calling transaction, if epoch is still current;
-- otherwise it raises SQLSTATE MP001 saying who holds the session. Every
-- write of a session starts with it.
CREATE FUNCTION musepi_fence(p_session text, p_epoch bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cur_epoch bigint;
    cur_owner text;
BEGIN
    PERFORM 1 FROM musepi_sessions WHERE session_id = p_session AND epoch = p_epoch FOR SHARE;
    IF NOT FOUND THEN
        SELECT epoch, owner INTO cur_epoch, cur_owner FROM musepi_sessions WHERE session_id = p_session;
        RAISE EXCEPTION 'this log holds epoch %, node % took epoch %', p_epoch, cur_owner, cur_epoch
            USING ERRCODE = 'MP001';
    END IF;
END
$$;

-- The history: one protobuf-encoded messages.Entry per row, seq 1, 2, 3...
-- The primary key forbids duplicates; the foreign key from (session_id,
-- seq - 1) to the entry before forbids gaps.
CREATE TABLE musepi_entries (
    session_id text NOT NULL REFERENCES musepi_sessions,
    seq        bigint NOT NULL CHECK (seq > 0),
    prev_seq   bigint GENERATED ALWAYS AS (NULLIF(seq - 1, 0)) STORED,
    entry      bytea NOT NULL,
    PRIMARY KEY (session_id, seq),
    FOREIGN KEY (session_id, prev_seq) REFERENCES musepi_entries (session_id, seq)
);

-- Each session's compact record (opaque bytes) and when it is next due;
-- claimed_by/claim_until: a durable timer's claim on waking it.
CREATE TABLE musepi_records (
    session_id  text PRIMARY KEY REFERENCES musepi_sessions,
    record      bytea NOT NULL,
    due_at      timestamptz,               -- NULL: nothing pending
    epoch       bigint NOT NULL,           -- the epoch that wrote it
    updated_at  timestamptz NOT NULL DEFAULT now(),
    claimed_by  text,
    claim_until timestamptz
);
CREATE INDEX musepi_records_due ON musepi_records (due_at, session_id) WHERE due_at IS NOT NULL;

-- Credential blocks (kind 'credential': scope = provider, name = credential
-- name) and model cooldowns (kind 'model': scope = role, name = selector).
CREATE TABLE musepi_blocks (
    kind  text NOT NULL CHECK (kind IN ('credential', 'model')),
    scope text NOT NULL,
    name  text NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (kind, scope, name)
);
