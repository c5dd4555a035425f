package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/musepi/musepi/messages"
)

// ErrNoSession is returned by Inspector.History for a session the
// database has no row of.
var ErrNoSession = errors.New("no such session in the database")

// Inspector reads a cluster's database without changing it, for
// operators: the node incarnations' leases, the sessions with their
// epochs, owners and records, and their histories. Unlike Connect,
// Inspect registers no node, migrates nothing and starts nothing; its
// connections are read-only (default_transaction_read_only), so that no
// query through it can take an epoch or claim a session.
type Inspector struct {
	pool *pgxpool.Pool
}

// Inspect opens an Inspector on the database at url (as Connect's, with
// the same connect timeout), whose schema must be at SchemaVersion: a
// database no node has connected to, or one at another version, fails
// (ErrSchemaTooNew for a newer one).
func Inspect(ctx context.Context, url string) (*Inspector, error) {
	cfg, err := poolConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: inspect: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: inspect: %w", err)
	}
	if err := checkSchema(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: inspect: %w", err)
	}
	return &Inspector{pool: pool}, nil
}

// checkSchema fails unless the database's schema is at SchemaVersion.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('musepi_schema_version') IS NOT NULL").Scan(&exists); err != nil {
		return err
	}
	version := 0
	if exists {
		if err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM musepi_schema_version").Scan(&version); err != nil {
			return err
		}
	}
	switch {
	case version == 0:
		return errors.New("the database has no MusePi tables (no node has connected to it)")
	case version > SchemaVersion():
		return fmt.Errorf("%w: the database is at version %d, this program knows up to %d: run a newer musepi",
			ErrSchemaTooNew, version, SchemaVersion())
	case version < SchemaVersion():
		return fmt.Errorf("the database is at schema version %d, this program reads version %d (a node of this version migrates it when it connects)",
			version, SchemaVersion())
	}
	return nil
}

// Close closes the Inspector's connections.
func (i *Inspector) Close() { i.pool.Close() }

// Snapshot is the cluster's state in the database at one instant.
type Snapshot struct {
	// Now is the database's clock, which leases and claims run on.
	Now time.Time
	// Nodes are the rows of musepi_nodes, by node.
	Nodes []NodeLease
	// Sessions are the rows of musepi_sessions, by session id.
	Sessions []SessionState
}

// NodeLease is a node incarnation's row: its lease.
type NodeLease struct {
	Node       string // name#incarnation
	LeaseUntil time.Time
	Live       bool // the lease has not run out (by the database's clock)
}

// SessionState is a session's row with its record.
type SessionState struct {
	ID string
	// Epoch is its current activation epoch, Owner the node incarnation
	// that took it ("" before the first open), TakenAt when.
	Epoch   int64
	Owner   string
	TakenAt time.Time
	// Held is true while an open Log holds the session; OwnerLive while
	// Owner's lease has not run out (false too when its row was pruned).
	// A session held by a node that is not live is free to take over.
	Held      bool
	OwnerLive bool
	// Entries is the seq of its history's last entry (0: none).
	Entries int64
	// Record is the session's record (nil: it has none), written by
	// activation RecordEpoch; ClaimedBy and ClaimUntil a durable timer's
	// claim on waking it ("" and zero: none).
	Record      *Record
	RecordEpoch int64
	ClaimedBy   string
	ClaimUntil  time.Time
}

// Snapshot reads the nodes and the sessions in one read-only transaction.
func (i *Inspector) Snapshot(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{}
	err := pgx.BeginTxFunc(ctx, i.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&snap.Now); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, "SELECT node, lease_until, lease_until > now() FROM musepi_nodes ORDER BY node")
		if err != nil {
			return err
		}
		snap.Nodes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (NodeLease, error) {
			var n NodeLease
			return n, row.Scan(&n.Node, &n.LeaseUntil, &n.Live)
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT s.session_id, s.epoch, s.owner, s.taken_at, s.held,
				coalesce(n.lease_until > now(), false),
				coalesce((SELECT max(e.seq) FROM musepi_entries e WHERE e.session_id = s.session_id), 0),
				r.record, r.due_at, coalesce(r.epoch, 0), coalesce(r.claimed_by, ''), r.claim_until
			FROM musepi_sessions s
			LEFT JOIN musepi_nodes n ON n.node = s.owner
			LEFT JOIN musepi_records r USING (session_id)
			ORDER BY s.session_id`)
		if err != nil {
			return err
		}
		snap.Sessions, err = pgx.CollectRows(rows, scanSession)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: inspect: %w", err)
	}
	return snap, nil
}

// scanSession reads a row of Snapshot's sessions query.
func scanSession(row pgx.CollectableRow) (SessionState, error) {
	var (
		s          SessionState
		data       []byte
		due, claim *time.Time
	)
	err := row.Scan(&s.ID, &s.Epoch, &s.Owner, &s.TakenAt, &s.Held, &s.OwnerLive, &s.Entries,
		&data, &due, &s.RecordEpoch, &s.ClaimedBy, &claim)
	if data != nil {
		s.Record = &Record{Data: data}
		if due != nil {
			s.Record.Due = *due
		}
	}
	if claim != nil {
		s.ClaimUntil = *claim
	}
	return s, err
}

// History returns session's history, oldest first, as loading it would
// (an entry that does not decode fails with history.ErrInvalid), without
// taking an epoch; ErrNoSession if the database has no such session.
func (i *Inspector) History(ctx context.Context, session string) ([]*messages.Entry, error) {
	var entries []*messages.Entry
	err := pgx.BeginTxFunc(ctx, i.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var found bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM musepi_sessions WHERE session_id = $1)", session).Scan(&found); err != nil {
			return err
		}
		if !found {
			return ErrNoSession
		}
		var err error
		entries, err = loadEntries(ctx, tx, session)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: inspect: session %s: %w", session, err)
	}
	return entries, nil
}
