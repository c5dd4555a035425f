package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

// ErrFenced is returned (in a *history.Error) by a write of a Log whose
// session another activation has taken since: the write changed nothing.
// The Log stays fenced; close it and let the session's new owner serve it.
var ErrFenced = fmt.Errorf("session taken over by a newer activation (%w)", history.ErrTaken)

// Open opens session's history as the history.Store contract says, taking
// a new activation epoch for it. It fails with history.ErrLocked while a
// Log of a live node (this one or another) holds the session; a session
// held by a node whose lease has run out (it died without closing) is
// taken over, which fences the dead node's Log. Each operation is bounded
// by the Store's timeout.
func (s *Store) Open(session string) (history.Log, []*messages.Entry, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	return s.OpenContext(ctx, session)
}

// OpenContext is Open with a context.
func (s *Store) OpenContext(ctx context.Context, session string) (*Log, []*messages.Entry, error) {
	return s.open(ctx, session, false)
}

// Takeover opens session's history whoever holds it: for the cluster,
// which knows from its membership that the holder's node is gone before
// its lease runs out. It takes a new epoch, so the previous holder's next
// write fails with ErrFenced and writes nothing.
func (s *Store) Takeover(ctx context.Context, session string) (*Log, []*messages.Entry, error) {
	return s.open(ctx, session, true)
}

// LockedError is Open's error while a live node holds the session: the
// holder's node incarnation and epoch. It wraps history.ErrLocked.
type LockedError struct {
	Owner string // the holder's node incarnation (name#random)
	Epoch int64
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%v (node %s, epoch %d)", history.ErrLocked, e.Owner, e.Epoch)
}

// Unwrap is history.ErrLocked.
func (e *LockedError) Unwrap() error { return history.ErrLocked }

// holder is a session's row as Open finds it.
type holder struct {
	epoch int64
	owner string
	held  bool
	live  bool // owner's lease has not run out
}

func (s *Store) open(ctx context.Context, session string, force bool) (*Log, []*messages.Entry, error) {
	fail := func(err error) error { return &history.Error{Op: "open", Path: session, Err: err} }
	switch {
	case s.closed.Load():
		return nil, nil, fail(history.ErrClosed)
	case !history.ValidSessionID(session):
		return nil, nil, fail(history.ErrBadSessionID)
	}
	gen := s.leaseGen.Load() // before the claim: a lapse after it makes Hold re-claim
	prev, epoch, entries, err := s.takeEpoch(ctx, session, force)
	if err != nil {
		var he *history.Error
		if errors.As(err, &he) {
			he.Op = "open"
			return nil, nil, he
		}
		return nil, nil, fail(err)
	}
	if prev.held {
		s.log.Info("took the session over", slog.String("session", session), slog.String("from", prev.owner), slog.Int64("from_epoch", prev.epoch), slog.Bool("forced", force), slog.Int64("epoch", epoch))
	}
	var last uint64
	if n := len(entries); n > 0 {
		last = entries[n-1].GetSeq()
	}
	return &Log{store: s, session: session, epoch: epoch, seq: last, leaseGen: gen}, entries, nil
}

// takeEpoch claims session for this node under a new epoch and loads its
// entries, in one transaction; prev is the holder it found. It fails with
// history.ErrLocked while a live node holds the session, unless force.
func (s *Store) takeEpoch(ctx context.Context, session string, force bool) (prev holder, epoch int64, entries []*messages.Entry, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO musepi_sessions (session_id) VALUES ($1) ON CONFLICT DO NOTHING", session); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT s.epoch, s.owner, s.held, coalesce(n.lease_until > now(), false)
			FROM musepi_sessions s LEFT JOIN musepi_nodes n ON n.node = s.owner
			WHERE s.session_id = $1 FOR UPDATE OF s`, session).Scan(&prev.epoch, &prev.owner, &prev.held, &prev.live); err != nil {
			return err
		}
		if prev.held && prev.live && !force {
			return &LockedError{Owner: prev.owner, Epoch: prev.epoch}
		}
		if err := tx.QueryRow(ctx, `UPDATE musepi_sessions SET epoch = epoch + 1, owner = $2, held = true, taken_at = now()
			WHERE session_id = $1 RETURNING epoch`, session, s.node).Scan(&epoch); err != nil {
			return err
		}
		var err error
		entries, err = loadEntries(ctx, tx, session)
		return err // invalid content rolls the new epoch back: nothing is written
	})
	return prev, epoch, entries, err
}

// loadEntries reads a session's history, oldest first. An entry that does
// not decode fails with ErrInvalid in a *history.Error whose Line is its seq.
func loadEntries(ctx context.Context, q querier, session string) ([]*messages.Entry, error) {
	rows, err := q.Query(ctx, "SELECT seq, entry FROM musepi_entries WHERE session_id = $1 ORDER BY seq", session)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		out []*messages.Entry
		seq int64
		raw []byte
	)
	for rows.Next() {
		if err := rows.Scan(&seq, &raw); err != nil {
			return nil, err
		}
		e := &messages.Entry{}
		err := proto.Unmarshal(raw, e)
		if err == nil && e.GetSeq() != uint64(seq) {
			err = fmt.Errorf("the entry holds seq %d", e.GetSeq())
		}
		if err != nil {
			return nil, &history.Error{Op: "load", Path: session, Line: int(seq), Err: fmt.Errorf("%w: %v", history.ErrInvalid, err)}
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// querier is what loadEntries needs of a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Log is one open session history: a history.Log whose every write is
// conditional, in its transaction, on its epoch still being the session's
// current one. It is safe for concurrent use.
type Log struct {
	store   *Store
	session string
	epoch   int64

	mu       sync.Mutex // serialises writes; guards epoch (after open), seq, closed, fenced, leaseGen
	seq      uint64     // of the last entry
	closed   bool
	fenced   error  // the ErrFenced error, once seen: epochs only grow
	leaseGen uint64 // the Store's leaseGen this Log last held its session under
}

var _ history.Log = (*Log)(nil)

// Epoch is the activation epoch this Log holds.
func (l *Log) Epoch() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// Session is the session id.
func (l *Log) Session() string { return l.session }

// usable fails once the Log or its Store is closed; l.mu is held.
func (l *Log) usable(op string) error {
	if l.closed || l.store.closed.Load() {
		return &history.Error{Op: op, Path: l.session, Err: history.ErrClosed}
	}
	return nil
}

// Append adds entries, all or nothing, in one transaction that first
// checks the Log's epoch is current (ErrFenced otherwise), in one round
// trip to the database. A transient failure is retried (WithWriteRetry),
// each attempt bounded by the Store's timeout.
func (l *Log) Append(entries ...*messages.Entry) error {
	return l.commit(context.Background(), l.store.timeout, nil, entries)
}

// Commit appends entries and, if rec is not nil, saves it as the session's
// record, in one fenced transaction: both or neither. Saving the record
// clears a durable timer's claim on it. A write that meets a transient
// error (Transient) is tried again until it gets through, ctx ends, the
// Store closes or the Store's write retry (WithWriteRetry) has passed
// since its first failure; writes stay in order (the Log's writes wait
// for it). A fenced write is never retried.
func (l *Log) Commit(ctx context.Context, rec *Record, entries ...*messages.Entry) error {
	return l.commit(ctx, 0, rec, entries)
}

// commit is Commit with each attempt bounded by timeout (0: ctx only).
func (l *Log) commit(ctx context.Context, timeout time.Duration, rec *Record, entries []*messages.Entry) error {
	op := "append"
	if len(entries) == 0 {
		if rec == nil {
			return nil
		}
		op = "save record"
	}
	fail := func(err error) error { return &history.Error{Op: op, Path: l.session, Err: err} }
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(op); err != nil {
		return err
	}
	if l.fenced != nil {
		return fail(l.fenced)
	}
	if err := checkSeq(l.seq, entries); err != nil {
		return fail(err)
	}
	seqs, raws, err := encodeEntries(entries)
	if err != nil {
		return fail(err)
	}
	if err := l.write(ctx, timeout, rec, seqs, raws); err != nil {
		return fail(err)
	}
	if n := len(entries); n > 0 {
		l.seq = entries[n-1].GetSeq()
	}
	return nil
}

// encodeEntries returns the seqs of entries and their encodings, for a
// write's batch.
func encodeEntries(entries []*messages.Entry) (seqs []int64, raws [][]byte, err error) {
	seqs, raws = make([]int64, len(entries)), make([][]byte, len(entries))
	for i, e := range entries {
		b, err := proto.Marshal(e)
		if err != nil {
			return nil, nil, fmt.Errorf("encode seq %d: %w", e.GetSeq(), err)
		}
		seqs[i], raws[i] = int64(e.GetSeq()), b
	}
	return seqs, raws, nil
}

// write runs a write's batch, trying it again after a transient error
// until it gets through, ctx ends or the Store's write retry has passed
// since the first failure (see Commit). l.mu is held.
func (l *Log) write(ctx context.Context, timeout time.Duration, rec *Record, seqs []int64, raws [][]byte) error {
	var failed time.Time // when the first attempt failed
	for attempt := 1; ; attempt++ {
		err := l.send(ctx, timeout, l.batch(rec, seqs, raws, attempt > 1))
		if err == nil {
			if attempt > 1 {
				l.store.outageOver()
			}
			return nil
		}
		if !Transient(err) || ctx.Err() != nil || l.store.writeRetry == 0 {
			return l.writeError(err)
		}
		if attempt == 1 {
			failed = time.Now()
			l.store.outageFailed(err)
		}
		left := l.store.writeRetry - time.Since(failed)
		if left <= 0 {
			return fmt.Errorf("the database failed for %s (%d attempts): %w", time.Since(failed).Round(time.Millisecond), attempt, err)
		}
		if perr := l.store.pause(ctx, min(l.store.retryDelay(attempt), left)); perr != nil {
			return fmt.Errorf("%w; the last attempt failed: %v", perr, err)
		}
	}
}

// batch is a write's statements: the fence, the record's, the entries'.
// It runs in one implicit transaction, which the fence's error (or any
// other) rolls back whole. A retry (again) skips the entries already in
// the table: an attempt whose reply was lost (the connection broke after
// the server committed) wrote them all, and no other writer can have
// written those seqs under this epoch.
func (l *Log) batch(rec *Record, seqs []int64, raws [][]byte, again bool) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("SELECT musepi_fence($1, $2)", l.session, l.epoch)
	if rec != nil {
		queueSaveRecord(b, l.session, l.epoch, *rec)
	}
	if len(seqs) > 0 {
		insert := `INSERT INTO musepi_entries (session_id, seq, entry)
			SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])`
		if again {
			insert += " ON CONFLICT DO NOTHING"
		}
		b.Queue(insert, l.session, seqs, raws)
	}
	return b
}

// send runs a write's batch in one round trip, bounded by timeout (0:
// ctx only).
func (l *Log) send(ctx context.Context, timeout time.Duration, b *pgx.Batch) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return l.store.pool.SendBatch(ctx, b).Close()
}

// fenceFailed is the SQLSTATE musepi_fence raises for a stale epoch.
const fenceFailed = "MP001"

// writeError reports a failed fenced write: ErrFenced (remembered: epochs
// only grow) when the epoch was stale, history.ErrInvalid for a violated
// key of the entries table (a duplicate or missing seq, which checkSeq
// should have caught first). l.mu is held.
func (l *Log) writeError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case fenceFailed:
		l.fenced = fmt.Errorf("%w: %s", ErrFenced, pe.Message)
		return l.fenced
	case "23505", "23503":
		return fmt.Errorf("%w: %s (%s)", history.ErrInvalid, pe.Message, pe.Detail)
	}
	return err
}

// checkSeq fails unless entries continue a history whose last seq is last
// (the rule of history's own stores).
func checkSeq(last uint64, entries []*messages.Entry) error {
	for _, e := range entries {
		if e.GetSeq() != last+1 {
			return fmt.Errorf("%w: appending seq %d after %d", history.ErrInvalid, e.GetSeq(), last)
		}
		last++
	}
	return nil
}

// Sync returns nil: each Append is committed, and so durable, before it
// returns. It fails with history.ErrClosed after Close.
func (l *Log) Sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.usable("sync")
}

// Load returns the whole history, oldest first.
func (l *Log) Load() ([]*messages.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable("load"); err != nil {
		return nil, err
	}
	ctx, cancel := l.store.ctx()
	defer cancel()
	entries, err := loadEntries(ctx, l.store.pool, l.session)
	var he *history.Error
	if err != nil && !errors.As(err, &he) {
		err = &history.Error{Op: "load", Path: l.session, Err: err}
	}
	return entries, err
}

// Close releases the session for another writer (nothing to release once
// it was taken over). It is a no-op the second time.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.store.closed.Load() {
		return nil // the Store's Close freed the node's sessions
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.store.timeout)
	defer cancel()
	if _, err := l.store.pool.Exec(ctx, "UPDATE musepi_sessions SET held = false WHERE session_id = $1 AND epoch = $2",
		l.session, l.epoch); err != nil {
		return &history.Error{Op: "close", Path: l.session, Err: err}
	}
	return nil
}
