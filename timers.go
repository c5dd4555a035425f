package musepi

import (
	"context"
	"time"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/timers"
)

// TimerStore is a history store with durable timers, as cluster/pgstore's
// Store is: it lists the sessions whose record is due (a backoff that
// ends, written by their session) and that no live node holds, and claims
// them for one node at a time. A runtime on such a store claims due
// sessions every WithTimerPoll (default 1 s) and opens each: the session
// resumes its retry chain from its record, so a session that waited out a
// long backoff (a usage limit: minutes to hours) on a node that died or
// left wakes on whichever node claims it. Sessions a live node holds are
// that node's to wake. Claiming is the durable side of the runtime's
// timer service (package timers), which owns every backoff.
type TimerStore interface {
	history.Store
	// Claim claims up to limit sessions due at or before t that nobody has
	// claimed within ttl (see cluster/pgstore's Timers).
	Claim(ctx context.Context, t time.Time, limit int, ttl time.Duration) ([]history.DueRecord, error)
}

var _ timers.Store = TimerStore(nil)

// startTimers starts the durable side of the runtime's timer service
// when the store has durable timers and claiming is on: due sessions that
// no live node holds are claimed and opened here (see timers.ClaimDue).
func (rt *Runtime) startTimers() {
	if ts, ok := rt.store.(TimerStore); ok {
		rt.timers.ClaimDue(rt.cfg.timerPoll, ts, rt.wakeDue, rt.cfg.log)
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
