package timers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/musepi/musepi/history"
)

// Store is a history store's durable timers, as musepi.TimerStore (and
// cluster/pgstore's Store) has them.
type Store interface {
	// Claim claims up to limit sessions due at or before t that no live
	// node holds and nobody has claimed within ttl.
	Claim(ctx context.Context, t time.Time, limit int, ttl time.Duration) ([]history.DueRecord, error)
}

// Open opens a claimed session on this node: its core resumes from the
// record and arms what is left of its backoff with the service (Arm).
type Open func(ctx context.Context, due history.DueRecord) error

// Bounds of one claim: how many sessions, and for how long another node
// may not claim them (opening a session writes its record, which ends the
// claim; a claimant that dies first lets it run out).
const (
	claimLimit = 64
	claimTTL   = 30 * time.Second
)

// claimLoop is a service's durable side, while it runs.
type claimLoop struct {
	mu   sync.Mutex
	stop context.CancelFunc
	done sync.WaitGroup
}

// ClaimDue claims the sessions due on store that no live node holds every
// `every` and opens each (open): the durable timers, whose owner died or
// left. Their due times are on the service's clock, but the loop polls a
// database that other nodes write, so it ticks on the wall clock (a poll
// on a virtual clock would never let it rest). A second call, or one
// with every <= 0, does nothing; StopClaiming ends it.
func (s *Service) ClaimDue(every time.Duration, store Store, open Open, log *slog.Logger) {
	c := &s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil || every <= 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	c.done.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s.claimOnce(ctx, store, open, log)
		}
	})
}

// StopClaiming stops the claim loop, if it runs, and waits for it.
func (s *Service) StopClaiming() {
	c := &s.claims
	c.mu.Lock()
	stop := c.stop
	c.stop = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
		c.done.Wait()
	}
}

// claimOnce claims the due sessions once and opens each.
func (s *Service) claimOnce(ctx context.Context, store Store, open Open, log *slog.Logger) {
	due, err := store.Claim(ctx, s.clk.Now(), claimLimit, claimTTL)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("claim due sessions", slog.Any("error", err))
		}
		return
	}
	for _, d := range due {
		if err := open(ctx, d); err != nil && ctx.Err() == nil {
			log.Warn("wake a due session", slog.Any("error", err), slog.String("session", d.Session))
		}
	}
}
