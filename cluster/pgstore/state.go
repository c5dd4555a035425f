package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

// Record is a session's compact durable state (history.Record): what the
// session core needs to resume (its retry chain's attempt and due time,
// the prompt generation, the chosen credential and model), in an encoding
// the caller chooses; the store keeps Data as opaque bytes. Due is kept in
// a column of its own for the durable timers.
type Record = history.Record

// SessionRecords is the record an activation keeps next to its history.
// Its writes are fenced like the history's: they fail with ErrFenced, and
// write nothing, once another activation has taken the session.
type SessionRecords interface {
	// SaveRecord replaces the session's record.
	SaveRecord(ctx context.Context, rec Record) error
	// LoadRecord returns the session's record; found is false if it has
	// none.
	LoadRecord(ctx context.Context) (rec Record, found bool, err error)
}

var (
	_ SessionRecords    = (*Log)(nil)
	_ history.RecordLog = (*Log)(nil)
)

// DueRecord is a passivated session's record that is due (history.DueRecord).
type DueRecord = history.DueRecord

// Timers finds the passivated sessions whose records are due: sessions
// with a record whose Due is set and no open Log on a live node. Results
// are ordered by Due, then session id.
type Timers interface {
	// Due lists up to limit passivated sessions due at or before t,
	// whether claimed or not.
	Due(ctx context.Context, t time.Time, limit int) ([]DueRecord, error)
	// Claim claims up to limit passivated sessions due at or before t that
	// no node holds an unexpired claim on, for ttl: concurrent claims from
	// any number of nodes never return the same session twice within ttl.
	// The claimant wakes each session (opening its Log); the woken
	// session's next record clears the claim. A claim that runs out with
	// the record still due (the claimant died) may be claimed again. The
	// ttl runs on the database's clock, t on the caller's.
	Claim(ctx context.Context, t time.Time, limit int, ttl time.Duration) ([]DueRecord, error)
}

// SaveRecord replaces the session's record in a fenced transaction, and
// clears any timer's claim on it.
func (l *Log) SaveRecord(ctx context.Context, rec Record) error { return l.Commit(ctx, &rec) }

// CommitRecord is Commit with each attempt bounded by the Store's timeout,
// for the runtime's sessions (history.RecordLog).
func (l *Log) CommitRecord(rec Record, entries ...*messages.Entry) error {
	return l.commit(context.Background(), l.store.timeout, &rec, entries)
}

// LastRecord is LoadRecord bounded by the Store's timeout
// (history.RecordLog).
func (l *Log) LastRecord() (Record, bool, error) {
	ctx, cancel := l.store.ctx()
	defer cancel()
	return l.LoadRecord(ctx)
}

// LoadRecord returns the session's record.
func (l *Log) LoadRecord(ctx context.Context) (Record, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable("load record"); err != nil {
		return Record{}, false, err
	}
	var (
		rec Record
		due *time.Time
	)
	err := l.store.pool.QueryRow(ctx, "SELECT record, due_at FROM musepi_records WHERE session_id = $1", l.session).Scan(&rec.Data, &due)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Record{}, false, nil
	case err != nil:
		return Record{}, false, &history.Error{Op: "load record", Path: l.session, Err: err}
	}
	if due != nil {
		rec.Due = *due
	}
	return rec, true, nil
}

// queueSaveRecord queues the write of a session's record in a batch the
// caller has fenced.
func queueSaveRecord(b *pgx.Batch, session string, epoch int64, rec Record) {
	data := rec.Data
	if data == nil {
		data = []byte{} // NULL is not a record
	}
	var due *time.Time
	if !rec.Due.IsZero() {
		due = &rec.Due
	}
	b.Queue(`INSERT INTO musepi_records (session_id, record, due_at, epoch) VALUES ($1, $2, $3, $4)
		ON CONFLICT (session_id) DO UPDATE SET record = EXCLUDED.record, due_at = EXCLUDED.due_at,
			epoch = EXCLUDED.epoch, updated_at = now(), claimed_by = NULL, claim_until = NULL`,
		session, data, due, epoch)
}

// dueWhere selects the passivated sessions due at or before $1.
const dueWhere = `FROM musepi_records r
	JOIN musepi_sessions s USING (session_id)
	LEFT JOIN musepi_nodes n ON n.node = s.owner
	WHERE r.due_at <= $1 AND NOT (s.held AND coalesce(n.lease_until > now(), false))`

// Due lists passivated sessions due at or before t.
func (s *Store) Due(ctx context.Context, t time.Time, limit int) ([]DueRecord, error) {
	if err := s.timerArgs(t, limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT r.session_id, r.record, r.due_at, r.epoch `+dueWhere+`
		ORDER BY r.due_at, r.session_id LIMIT $2`, t, limit)
	return collectDue(rows, err)
}

// Claim claims passivated sessions due at or before t for this node.
func (s *Store) Claim(ctx context.Context, t time.Time, limit int, ttl time.Duration) ([]DueRecord, error) {
	if err := s.timerArgs(t, limit); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("pgstore: timers: claim for %v: want a positive ttl", ttl)
	}
	rows, err := s.pool.Query(ctx, `WITH due AS (
			SELECT r.session_id `+dueWhere+` AND (r.claim_until IS NULL OR r.claim_until <= now())
			ORDER BY r.due_at, r.session_id LIMIT $2
			FOR UPDATE OF r SKIP LOCKED)
		UPDATE musepi_records r SET claimed_by = $3, claim_until = now() + $4
		FROM due WHERE r.session_id = due.session_id
		RETURNING r.session_id, r.record, r.due_at, r.epoch`, t, limit, s.node, ttl)
	return collectDue(rows, err)
}

func (s *Store) timerArgs(t time.Time, limit int) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("pgstore: timers: %w", history.ErrClosed)
	case t.IsZero() || limit <= 0:
		return fmt.Errorf("pgstore: timers: want a time and a positive limit (got %v, %d)", t, limit)
	}
	return nil
}

// collectDue reads DueRecords, sorted by due time then session.
func collectDue(rows pgx.Rows, err error) ([]DueRecord, error) {
	if err != nil {
		return nil, fmt.Errorf("pgstore: timers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DueRecord, error) {
		var d DueRecord
		err := row.Scan(&d.Session, &d.Data, &d.Due, &d.Epoch)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: timers: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Due.Equal(out[j].Due) {
			return out[i].Due.Before(out[j].Due)
		}
		return out[i].Session < out[j].Session
	})
	return out, nil
}
