package pgstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/retry"
)

// The delays between a write's attempts: writeRetryBase doubled at each
// attempt up to writeRetryMax, jittered.
const (
	writeRetryBase = 100 * time.Millisecond
	writeRetryMax  = 2 * time.Second
)

// retryDelay is the jittered delay before attempt+1 of a write (attempt
// from 1).
func (s *Store) retryDelay(attempt int) time.Duration {
	s.jitterMu.Lock()
	r := s.jitter.Float64()
	s.jitterMu.Unlock()
	d := min(retry.NominalBackoff(attempt, writeRetryBase), writeRetryMax)
	return time.Duration(float64(d) * retry.JitterFactor(r))
}

// pause waits d before a write's next attempt. It fails when ctx ends
// first, or the Store closes (history.ErrClosed).
func (s *Store) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return history.ErrClosed
	}
}

// outage is the outage that writes retry through, if any, so that it is
// logged once: a warning when a write first meets a transient error, a
// line when a write that was retried gets through, however many writes
// retry meanwhile.
type outage struct {
	mu      sync.Mutex
	since   time.Time // of the first failure; zero: no outage
	retried int       // writes that met it
}

// outageFailed records a write's first transient failure. The first of
// an outage also drops the pool's connections: after a restart every one
// is dead, and one left idle through the outage would fail a write after
// it.
func (s *Store) outageFailed(err error) {
	o := &s.outage
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retried++
	if o.since.IsZero() {
		o.since = time.Now()
		s.pool.Reset()
		s.log.Warn("database writes meet a transient error; retrying each for a bounded time", slog.Any("error", err), slog.Duration("retrying_for", s.writeRetry))
	}
}

// outageOver records that a retried write got through.
func (s *Store) outageOver() {
	o := &s.outage
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return
	}
	s.log.Info("database writes get through again", slog.Duration("after", time.Since(o.since)), slog.Int("writes_retried", o.retried))
	o.since, o.retried = time.Time{}, 0
}
