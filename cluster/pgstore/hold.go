package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/musepi/musepi/history"
)

// Hold tells whether this Log still holds its session, before the session
// acts for it (a provider call, a tool run): nil while the node's lease is
// sure (Store.LeaseSure) and has not lapsed since the Log last held the
// session, without a query. Otherwise it renews the lease and reads the
// session's epoch: ErrFenced (in a *history.Error, and remembered) when
// another activation has taken the session, or the error that kept it
// from telling. After a lapse of the lease (other nodes may have claimed
// the session meanwhile) it re-claims the session instead: a new epoch,
// only if the session's epoch is still this Log's.
func (l *Log) Hold(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced == nil && l.usable("hold") == nil && l.store.LeaseSure() && l.leaseGen == l.store.leaseGen.Load() {
		return nil
	}
	return l.verify(ctx)
}

// Verify renews the node's lease and checks that the session's epoch is
// still this Log's, whatever the lease: the check Hold makes when the
// lease is not sure, for a caller that has other reasons to doubt (the
// node's membership lapsed).
func (l *Log) Verify(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.verify(ctx)
}

// verify is Verify with l.mu held.
func (l *Log) verify(ctx context.Context) error {
	fail := func(err error) error { return &history.Error{Op: "hold", Path: l.session, Err: err} }
	if l.fenced != nil {
		return fail(l.fenced)
	}
	if err := l.usable("hold"); err != nil {
		return err
	}
	if err := l.store.renew(ctx); err != nil {
		return fail(fmt.Errorf("renew the node's lease: %w", err))
	}
	if gen := l.store.leaseGen.Load(); gen != l.leaseGen {
		return l.reclaim(ctx, gen)
	}
	_, err := l.readEpoch(ctx)
	return err
}

// Fence checks, with the database, that this Log still holds its session
// right now, whatever the node believes of its lease: one query that
// reads the session's epoch and whether the node's lease is live by the
// database's clock. A newer epoch fails with ErrFenced, as Hold does; a
// lease the database sees lapsed (the node's clock or its pause misled
// it) is renewed and the session re-claimed first (Verify). It is the
// check a cluster makes just before each provider request and tool run:
// a request goes out only under a fresh fence.
func (l *Log) Fence(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced != nil || l.usable("hold") != nil || l.leaseGen != l.store.leaseGen.Load() {
		return l.verify(ctx)
	}
	live, err := l.readEpoch(ctx)
	if err != nil || live {
		return err
	}
	return l.verify(ctx)
}

// readEpoch reads the session's epoch, and whether the node's lease is
// live by the database's clock; a newer epoch fences the Log (ErrFenced);
// l.mu is held.
func (l *Log) readEpoch(ctx context.Context) (live bool, err error) {
	fail := func(err error) error { return &history.Error{Op: "hold", Path: l.session, Err: err} }
	var epoch int64
	err = l.store.pool.QueryRow(ctx, `SELECT s.epoch, coalesce(n.lease_until > now(), false)
		FROM musepi_sessions s LEFT JOIN musepi_nodes n ON n.node = $2
		WHERE s.session_id = $1`, l.session, l.store.node).Scan(&epoch, &live)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fail(fmt.Errorf("session %s is not in the database", l.session))
	case err != nil:
		return false, fail(fmt.Errorf("read the session's epoch: %w", err))
	case epoch != l.epoch:
		l.fenced = fmt.Errorf("%w: epoch %d, this activation's %d", ErrFenced, epoch, l.epoch)
		return false, fail(l.fenced)
	}
	return live, nil
}

// Taken reports whether a write or a Hold of this Log has found that
// another activation took the session (history.Holder).
func (l *Log) Taken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fenced != nil
}

// reclaim takes the session again under the node's new lease (its
// leaseGen gen): a new epoch, if the session's epoch is still this Log's
// (a claim by another node locks the session's row, so it either comes
// first, and this one finds its epoch gone, or finds this node's lease
// live and leaves the session be); l.mu is held.
func (l *Log) reclaim(ctx context.Context, gen uint64) error {
	var epoch int64
	err := l.store.pool.QueryRow(ctx, `UPDATE musepi_sessions SET epoch = epoch + 1, taken_at = now()
		WHERE session_id = $1 AND epoch = $2 AND owner = $3 RETURNING epoch`, l.session, l.epoch, l.store.node).Scan(&epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		l.fenced = fmt.Errorf("%w: the node's lease ran out and another activation took the session (this activation's epoch %d)", ErrFenced, l.epoch)
		return &history.Error{Op: "hold", Path: l.session, Err: l.fenced}
	case err != nil:
		return &history.Error{Op: "hold", Path: l.session, Err: fmt.Errorf("re-claim the session: %w", err)}
	}
	l.epoch, l.leaseGen = epoch, gen
	return nil
}
