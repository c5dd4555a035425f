package musepi

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/history"
)

// TimerStore is a history store with durable timers, as cluster/pgstore's
// Store is: it lists the sessions whose record is due (a backoff that
// ends, written by their session) and that no live node holds, and claims
// them for one node at a time. A runtime on such a store claims due
// sessions every WithTimerPoll (default 1 s) and opens each: the session
// resumes its retry chain from its record, so a session that waited out a
// long backoff (a usage limit: minutes to hours) on a node that died or
// left wakes on whichever node claims it. Sessions a live node holds are
// that node's to wake.
type TimerStore interface {
	history.Store
	// Claim claims up to limit sessions due at or before t that nobody has
	// claimed within ttl (see cluster/pgstore's Timers).
	Claim(ctx context.Context, t time.Time, limit int, ttl time.Duration) ([]history.DueRecord, error)
}

// Bounds of one claim: how many sessions, and for how long another node
// may not claim them (opening a session writes its record, which ends the
// claim; a claimant that dies first lets it run out).
const (
	claimLimit = 64
	claimTTL   = 30 * time.Second
)

// timers is a runtime's claiming loop.
type timers struct {
	stop context.CancelFunc
	done sync.WaitGroup
}

// startTimers starts claiming due sessions when the store has durable
// timers and claiming is on.
func (rt *Runtime) startTimers() {
	ts, ok := rt.store.(TimerStore)
	if !ok || rt.cfg.timerPoll <= 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	rt.timers = &timers{stop: stop}
	rt.timers.done.Go(func() {
		tick := time.NewTicker(rt.cfg.timerPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rt.claimDue(ctx, ts)
		}
	})
}

// stopTimers stops the claiming loop and waits for it.
func (rt *Runtime) stopTimers() {
	if rt.timers != nil {
		rt.timers.stop()
		rt.timers.done.Wait()
	}
}

// claimDue claims the due sessions once and opens each.
func (rt *Runtime) claimDue(ctx context.Context, ts TimerStore) {
	due, err := ts.Claim(ctx, rt.cfg.clock.Now(), claimLimit, claimTTL)
	if err != nil {
		if ctx.Err() == nil {
			rt.cfg.log.Warn("claim due sessions", slog.Any("error", err))
		}
		return
	}
	for _, d := range due {
		if err := rt.wakeDue(ctx, d); err != nil && ctx.Err() == nil {
			rt.cfg.log.Warn("wake a due session", slog.Any("error", err), slog.String("session", d.Session))
		}
	}
}

// wakeDue opens a claimed session on the model and role its record names:
// it resumes its retry chain (NewSession), with nobody attached until a
// caller calls Attach.
func (rt *Runtime) wakeDue(ctx context.Context, d history.DueRecord) error {
	if _, open := rt.Session(d.Session); open {
		return nil
	}
	rec, found, err := actors.DecodeRecord(d.Record)
	if err != nil || !found {
		return err
	}
	role := rec.Role
	if role == "" {
		role = "default"
	}
	s, err := rt.NewSession(ctx, WithSessionID(d.Session), WithModel(rec.Primary), WithRole(role))
	if err == nil && rt.cluster != nil {
		// Opened at its activation, wherever the cluster placed it, which
		// goes on without this node's handle.
		rt.cluster.LetGo(s.id)
	}
	return err
}
