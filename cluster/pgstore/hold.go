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
// sure (Store.LeaseSure), without a query. Otherwise it renews the lease
// and reads the session's epoch: ErrFenced (in a *history.Error, and
// remembered) when another activation has taken the session, or the
// error that kept it from telling.
func (l *Log) Hold(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced == nil && l.usable("hold") == nil && l.store.LeaseSure() {
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
	var epoch int64
	err := l.store.pool.QueryRow(ctx, "SELECT epoch FROM musepi_sessions WHERE session_id = $1", l.session).Scan(&epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fail(fmt.Errorf("session %s is not in the database", l.session))
	case err != nil:
		return fail(fmt.Errorf("read the session's epoch: %w", err))
	case epoch != l.epoch:
		l.fenced = fmt.Errorf("%w: epoch %d, this activation's %d", ErrFenced, epoch, l.epoch)
		return fail(l.fenced)
	}
	return nil
}

// Taken reports whether a write or a Hold of this Log has found that
// another activation took the session (history.Holder).
func (l *Log) Taken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fenced != nil
}
