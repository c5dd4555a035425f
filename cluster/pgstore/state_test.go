package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/history"
)

// t0 is a due time in the past of the database's clock (claims and leases
// run on the database's clock; due times on the caller's).
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// passivate opens session on s, saves its record due at due and closes the
// log, as a session passivating in a long backoff would.
func passivate(t testing.TB, s *pgstore.Store, session string, due time.Time) {
	t.Helper()
	ctx := context.Background()
	l, _, err := s.OpenContext(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SaveRecord(ctx, pgstore.Record{Data: []byte("core of " + session), Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func sessionsOf(ds []pgstore.DueRecord) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Session)
	}
	return out
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	l, _, err := s.OpenContext(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, found, err := l.LoadRecord(ctx); found || err != nil {
		t.Fatalf("LoadRecord of a new session = found %v, %v", found, err)
	}
	due := t0.Add(1500 * time.Microsecond)
	for _, want := range []pgstore.Record{{Data: []byte{0, 1, 2}, Due: due}, {Data: nil}} {
		if err := l.SaveRecord(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, found, err := l.LoadRecord(ctx)
		if err != nil || !found || string(got.Data) != string(want.Data) || !got.Due.Equal(want.Due) {
			t.Errorf("LoadRecord = %+v, %v, %v; want %+v", got, found, err, want)
		}
	}
}

// Due lists the passivated sessions due by t, earliest first, up to the
// limit; a session held open on a live node is not passivated.
func TestDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	passivate(t, s, "late", t0.Add(3*time.Second))
	passivate(t, s, "early", t0.Add(1*time.Second))
	passivate(t, s, "mid", t0.Add(2*time.Second))
	passivate(t, s, "future", t0.Add(time.Hour))
	passivate(t, s, "none", time.Time{})
	passivate(t, s, "held", t0)
	held, _, err := s.OpenContext(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	tests := []struct {
		by    time.Time
		limit int
		want  string
	}{
		{t0.Add(3 * time.Second), 10, "[early mid late]"},
		{t0.Add(3 * time.Second), 2, "[early mid]"},
		{t0.Add(2 * time.Second), 10, "[early mid]"},
		{t0, 10, "[]"},
	}
	for _, tt := range tests {
		got, err := s.Due(ctx, tt.by, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(sessionsOf(got)) != tt.want {
			t.Errorf("Due(%v, %d) = %v, want %s", tt.by.Sub(t0), tt.limit, sessionsOf(got), tt.want)
		}
	}
	got, _ := s.Due(ctx, t0.Add(time.Second), 1)
	if len(got) != 1 || string(got[0].Data) != "core of early" || !got[0].Due.Equal(t0.Add(time.Second)) || got[0].Epoch != 1 {
		t.Errorf("Due record = %+v", got)
	}
	if _, err := s.Due(ctx, t0, 0); err == nil {
		t.Error("Due with limit 0 succeeded")
	}
	if _, err := s.Claim(ctx, t0, 1, 0); err == nil {
		t.Error("Claim for a ttl of 0 succeeded")
	}
}

// Two nodes claim due records concurrently, a few at a time: each record is
// claimed exactly once.
func TestClaimConcurrentlyOnce(t *testing.T) {
	t.Parallel()
	const records = 60
	ctx := context.Background()
	a, url := newStore(t)
	b := connect(t, url, "node-b")
	for i := range records {
		passivate(t, a, fmt.Sprintf("s%02d", i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	var (
		mu      sync.Mutex
		claimed = map[string]string{} // session -> node
		wg      sync.WaitGroup
	)
	for _, node := range []*pgstore.Store{a, b} {
		wg.Go(func() {
			for range records { // bounded: each round claims at least one until none is left
				got, err := node.Claim(ctx, t0.Add(time.Hour), 3, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, d := range got {
					if prev, ok := claimed[d.Session]; ok {
						t.Errorf("%s claimed by %s and again by %s", d.Session, prev, node.Node())
					}
					claimed[d.Session] = node.Node()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(claimed) != records {
		t.Fatalf("%d records claimed, want %d", len(claimed), records)
	}
	per := map[string]int{}
	for _, n := range claimed {
		per[n]++
	}
	t.Logf("claims per node: %v", per)
	if got, _ := a.Claim(ctx, t0.Add(time.Hour), 10, time.Minute); len(got) != 0 {
		t.Errorf("claimed again within the ttl: %v", sessionsOf(got))
	}
}

// A claim whose claimant died runs out and the record can be claimed again;
// a record the woken session saved is no longer claimed.
func TestClaimExpiresAndSaveClears(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := newStore(t)
	b := connect(t, url, "node-b")
	passivate(t, a, "s", t0)
	if got, _ := a.Claim(ctx, t0, 10, 2*time.Second); len(got) != 1 {
		t.Fatalf("first claim = %v", sessionsOf(got))
	}
	if got, _ := b.Claim(ctx, t0, 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed while A's claim lasts: %v", sessionsOf(got))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := b.Claim(ctx, t0, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's claim never ran out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// B wakes the session; it reschedules itself (and passivates again).
	passivate(t, b, "s", t0.Add(time.Second))
	got, err := a.Claim(ctx, t0.Add(time.Second), 10, time.Minute)
	if err != nil || len(got) != 1 || got[0].Epoch != 2 {
		t.Errorf("claim after the woken session saved = %+v, %v; want it claimable, written at B's epoch 2", got, err)
	}
}

// Later wins: a block is only ever extended, by any node; Clear ends only
// the block it saw.
func TestBlocksLaterWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := newStore(t)
	b := connect(t, url, "node-b")
	key := pgstore.CredentialKey("anthropic", "key-a")
	tests := []struct {
		node  *pgstore.Store
		until time.Duration
		want  time.Duration
	}{
		{a, 30 * time.Second, 30 * time.Second},
		{b, 10 * time.Second, 30 * time.Second}, // earlier: ignored
		{b, 45 * time.Second, 45 * time.Second},
		{a, 45 * time.Second, 45 * time.Second},
		{a, 44*time.Second + 999*time.Millisecond, 45 * time.Second},
	}
	for i, tt := range tests {
		got, err := tt.node.Block(ctx, key, t0.Add(tt.until))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(t0.Add(tt.want)) {
			t.Errorf("step %d: Block(+%v) = +%v, want +%v", i, tt.until, got.Sub(t0), tt.want)
		}
	}
	if _, err := a.Block(ctx, pgstore.CredentialKey("anthropic", "key-b"), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Block(ctx, pgstore.ModelKey("anthropic", "key-a"), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	blocked, err := b.Blocked(ctx, pgstore.CredentialKind, "anthropic", t0.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocked) != 1 || !blocked["key-a"].Equal(t0.Add(45*time.Second)) {
		t.Errorf("Blocked at +2s = %v, want key-a until +45s only", blocked)
	}

	if ok, err := b.Clear(ctx, key, t0.Add(30*time.Second)); ok || err != nil {
		t.Errorf("Clear of a block seen before it was extended = %v, %v; want false", ok, err)
	}
	if ok, err := b.Clear(ctx, key, t0.Add(45*time.Second)); !ok || err != nil {
		t.Errorf("Clear of the block in force = %v, %v; want true", ok, err)
	}
	if blocked, _ := a.Blocked(ctx, pgstore.CredentialKind, "anthropic", t0); len(blocked) != 1 {
		t.Errorf("after Clear, Blocked = %v, want key-b only", blocked)
	}
	cool, _ := a.Blocked(ctx, pgstore.ModelKind, "anthropic", t0)
	if len(cool) != 1 {
		t.Errorf("model cooldowns = %v: kinds must not mix", cool)
	}
	for _, bad := range []pgstore.BlockKey{{Kind: "x", Scope: "p", Name: "n"}, pgstore.CredentialKey("", "n"), pgstore.ModelKey("r", "")} {
		if _, err := a.Block(ctx, bad, t0); err == nil {
			t.Errorf("Block(%v) succeeded", bad)
		}
	}
	if _, err := a.Block(ctx, key, time.Time{}); err == nil {
		t.Error("Block until the zero time succeeded")
	}
}

// Commit saves the record and appends the entries in one transaction: when
// the entries fail (here the table already holds their seq, written behind
// the log's back), the record is not saved either.
func TestCommitAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := newStore(t)
	l, _, err := s.OpenContext(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Commit(ctx, &pgstore.Record{Data: []byte("old")}, user(1, "a")); err != nil {
		t.Fatal(err)
	}
	if err := sql(t, url, "INSERT INTO musepi_entries (session_id, seq, entry) VALUES ('s', 2, '')"); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx, &pgstore.Record{Data: []byte("new")}, user(2, "b")); !errors.Is(err, history.ErrInvalid) {
		t.Fatalf("Commit over a seq already in the table = %v, want ErrInvalid", err)
	}
	if rec, _, err := l.LoadRecord(ctx); err != nil || string(rec.Data) != "old" {
		t.Errorf("record after the failed Commit = %q, %v; want the old one", rec.Data, err)
	}
}
