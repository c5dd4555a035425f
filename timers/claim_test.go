package timers_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/timers"
)

// dueStore hands out each due record to one claimant, as a TimerStore's
// claim does (pgstore: FOR UPDATE SKIP LOCKED), or fails with err.
type dueStore struct {
	mu   sync.Mutex
	due  []history.DueRecord
	err  error
	seen time.Time // the t of the last claim
}

func (s *dueStore) Claim(_ context.Context, t time.Time, limit int, _ time.Duration) ([]history.DueRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = t
	if s.err != nil {
		return nil, s.err
	}
	n := min(limit, len(s.due))
	out := s.due[:n:n]
	s.due = s.due[n:]
	return out, nil
}

func (s *dueStore) left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.due)
}

// opened keeps the sessions a claim loop opened.
type opened struct {
	mu  sync.Mutex
	ids []string
	err error
}

func (o *opened) open(_ context.Context, d history.DueRecord) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, d.Session)
	return o.err
}

func (o *opened) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.ids)
}

// eventually waits (wall clock: the claim loop polls a database) until
// cond holds.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// Two nodes' services claim from one store: each due session is opened
// once, by the node whose claim got it, at the service's clock time.
func TestClaimDueOpensEachClaimedSessionOnce(t *testing.T) {
	var due []history.DueRecord
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		due = append(due, history.DueRecord{Session: id})
	}
	store := &dueStore{due: due}
	clk := clock.NewVirtual(t0)
	var nodes [2]opened
	for i := range nodes {
		svc := timers.New(clk, nil)
		svc.ClaimDue(time.Millisecond, store, nodes[i].open, slog.New(slog.DiscardHandler))
		svc.ClaimDue(time.Millisecond, store, nodes[i].open, slog.New(slog.DiscardHandler)) // a second call: no second loop
		t.Cleanup(svc.Close)
	}
	eventually(t, func() bool { return store.left() == 0 })
	var all []string
	for i := range nodes {
		nodes[i].mu.Lock()
		all = append(all, nodes[i].ids...)
		nodes[i].mu.Unlock()
	}
	slices.Sort(all)
	if !slices.Equal(all, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("opened %q, want each once", all)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if !store.seen.Equal(t0) {
		t.Fatalf("claimed at %v, want the service's clock (%v)", store.seen, t0)
	}
}

// A claim or an open that fails is logged and the loop goes on; a loop
// stopped claims no more, and a poll of 0 claims nothing.
func TestClaimDueFailures(t *testing.T) {
	cases := []struct {
		name      string
		every     time.Duration
		claimErr  error
		openErr   error
		wantLog   string
		wantOpens bool
	}{
		{"a claim that fails", time.Millisecond, errors.New("db down"), nil, `msg="claim due sessions" error="db down"`, false},
		{"an open that fails", time.Millisecond, nil, errors.New("locked"), `msg="wake a due session" error=locked session=a`, true},
		{"claiming off", 0, nil, nil, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs strings.Builder
			var mu sync.Mutex
			log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return logs.Write(p)
			}), nil))
			store := &dueStore{due: []history.DueRecord{{Session: "a"}}, err: c.claimErr}
			o := &opened{err: c.openErr}
			svc := timers.New(clock.NewVirtual(t0), nil)
			svc.ClaimDue(c.every, store, o.open, log)
			if c.wantLog != "" {
				eventually(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return strings.Contains(logs.String(), c.wantLog)
				})
			} else {
				time.Sleep(20 * time.Millisecond)
			}
			svc.StopClaiming()
			svc.StopClaiming() // stopped: nothing to do
			if got := o.count() > 0; got != c.wantOpens {
				t.Fatalf("opened %d sessions", o.count())
			}
		})
	}
}

// writerFunc is an io.Writer from a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
