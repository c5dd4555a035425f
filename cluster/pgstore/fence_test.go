package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

// checkFenced fails unless err is ErrFenced in a *history.Error of op.
func checkFenced(t *testing.T, err error, op string) {
	t.Helper()
	var he *history.Error
	if !errors.Is(err, pgstore.ErrFenced) || !errors.As(err, &he) || he.Op != op || he.Path != "s" {
		t.Fatalf("%s by the stale log = %v, want ErrFenced in a *history.Error of %s", op, err, op)
	}
}

// Node A opens the session; node B takes it over (the cluster knows A is
// gone); A's next append fails with ErrFenced and writes nothing, B
// appends fine, and the history stays contiguous.
func TestTakeoverFencesTheOldOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := newStore(t)
	b := connect(t, url, "node-b")

	la, _, err := a.OpenContext(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	if err := la.Append(user(1, "from A"), user(2, "from A")); err != nil {
		t.Fatal(err)
	}
	lb, got, err := b.Takeover(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if len(got) != 2 || lb.Epoch() != la.Epoch()+1 {
		t.Fatalf("takeover loaded %d entries at epoch %d, want 2 at epoch %d", len(got), lb.Epoch(), la.Epoch()+1)
	}

	checkFenced(t, la.Append(user(3, "stale A")), "append")
	checkFenced(t, la.SaveRecord(ctx, pgstore.Record{Data: []byte("stale")}), "save record")
	checkFenced(t, la.Commit(ctx, &pgstore.Record{Data: []byte("stale")}, user(3, "stale A")), "append")

	if err := lb.Commit(ctx, &pgstore.Record{Data: []byte("B's")}, user(3, "from B")); err != nil {
		t.Fatal(err)
	}
	if err := la.Close(); err != nil { // releases nothing: B holds the session
		t.Fatal(err)
	}
	if _, _, err := a.Open("s"); !errors.Is(err, history.ErrLocked) {
		t.Errorf("Open after the stale log's Close = %v, want ErrLocked (B still holds it)", err)
	}
	entries, err := lb.Load()
	if err != nil {
		t.Fatal(err)
	}
	checkContiguous(t, entries)
	if len(entries) != 3 || entries[2].GetUser().GetText() != "from B" {
		t.Errorf("history = %v, want A's two entries then B's", entries)
	}
	rec, _, err := lb.LoadRecord(ctx)
	if err != nil || string(rec.Data) != "B's" {
		t.Errorf("record = %q, %v; want B's", rec.Data, err)
	}
}

// A node that dies without closing its logs (its lease runs out) loses its
// sessions to the next Open on another node, without a forced takeover;
// while its lease lasts, the session stays locked.
func TestOpenTakesOverFromADeadNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := server.NewDatabase(t)
	a := connect(t, url, "node-a", pgstore.WithLease(2*time.Second))
	b := connect(t, url, "node-b")
	la, _, err := a.OpenContext(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Append(user(1, "A")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Open("s"); !errors.Is(err, history.ErrLocked) {
		t.Fatalf("Open while A lives = %v, want ErrLocked", err)
	}
	a.StopHeartbeat() // A "dies": its lease is no longer renewed
	deadline := time.Now().Add(10 * time.Second)
	var lb history.Log
	for {
		lb, _, err = b.Open("s")
		if err == nil {
			break
		}
		if !errors.Is(err, history.ErrLocked) || time.Now().After(deadline) {
			t.Fatalf("Open after A's lease ran out = %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer lb.Close()
	checkFenced(t, la.Append(user(2, "A after death")), "append")
	if err := lb.Append(user(2, "B")); err != nil {
		t.Fatal(err)
	}
}

// A stale node appending in a loop while another takes the session over:
// every append either lands before the takeover or fails with ErrFenced
// and writes nothing; the new owner continues from exactly what landed.
func TestTakeoverDuringAppends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := newStore(t)
	b := connect(t, url, "node-b")
	la, _, err := a.OpenContext(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()

	var (
		wg     sync.WaitGroup
		landed uint64
	)
	started := make(chan struct{})
	wg.Go(func() {
		for seq := uint64(1); seq <= 2000; seq++ {
			if seq == 5 {
				close(started)
			}
			err := la.Append(user(seq, "A"))
			if errors.Is(err, pgstore.ErrFenced) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			landed = seq
		}
		t.Error("A appended 2000 entries without being fenced")
	})
	<-started
	lb, got, err := b.Takeover(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	wg.Wait()
	if uint64(len(got)) != landed {
		t.Fatalf("B loaded %d entries, A's last successful append was seq %d", len(got), landed)
	}
	if err := lb.Append(&messages.Entry{Seq: landed + 1}); err != nil {
		t.Fatal(err)
	}
	all, err := lb.Load()
	if err != nil {
		t.Fatal(err)
	}
	checkContiguous(t, all)
	if uint64(len(all)) != landed+1 {
		t.Errorf("history has %d entries, want %d", len(all), landed+1)
	}
}

// A node whose lease ran out (its process paused past it) does not take
// its old epoch for still valid: its next Hold begins a new lease and
// re-claims the session with a new epoch, only if nobody claimed it
// meanwhile; a claim by another node makes the Hold fail as taken.
func TestHoldAfterTheLeaseLapsedReclaims(t *testing.T) {
	t.Parallel()
	for _, claimed := range []bool{false, true} {
		t.Run(map[bool]string{false: "nobody claimed it", true: "another node claimed it"}[claimed], func(t *testing.T) {
			ctx := context.Background()
			url := server.NewDatabase(t)
			a := connect(t, url, "node-a", pgstore.WithLease(time.Second))
			b := connect(t, url, "node-b")
			la, _, err := a.OpenContext(ctx, "s")
			if err != nil {
				t.Fatal(err)
			}
			l := la
			before := l.Epoch()
			a.StopHeartbeat() // paused: the lease runs out
			time.Sleep(1500 * time.Millisecond)
			if claimed {
				lb, _, err := b.Open("s")
				if err != nil {
					t.Fatal(err)
				}
				defer lb.Close()
			}
			err = l.Hold(ctx)
			switch {
			case claimed && !errors.Is(err, history.ErrTaken):
				t.Fatalf("Hold after b claimed = %v; want taken", err)
			case claimed:
				checkFenced(t, la.Append(user(1, "stale")), "append")
			case err != nil:
				t.Fatalf("Hold = %v; want the session re-claimed", err)
			case l.Epoch() != before+1:
				t.Fatalf("epoch %d after the re-claim; want %d", l.Epoch(), before+1)
			default:
				if _, _, err := b.Open("s"); !errors.Is(err, history.ErrLocked) {
					t.Fatalf("b's Open after the re-claim = %v; want ErrLocked", err)
				}
				if err := la.Append(user(1, "A")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestFenceAsksTheDatabase: Fence reads the session's epoch every time,
// where Hold trusts a sure lease: after a forced takeover that A's lease
// could not tell, A's Hold still says yes and its Fence says taken. A
// lease the database sees lapsed, while A's clock says sure, is begun
// anew and the session re-claimed before Fence says yes. A live holder's
// Open error names it (LockedError).
func TestFenceAsksTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, url := newStore(t)
	b := connect(t, url, "node-b")

	la, _, err := a.OpenContext(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	if err := la.Fence(ctx); err != nil {
		t.Fatalf("Fence of the holder = %v, want nil", err)
	}
	var locked *pgstore.LockedError
	if _, _, err = b.OpenContext(ctx, "s"); !errors.As(err, &locked) || locked.Owner != a.Node() || locked.Epoch != la.Epoch() {
		t.Fatalf("b's Open = %v, want a LockedError naming %s at epoch %d", err, a.Node(), la.Epoch())
	}
	if !errors.Is(err, history.ErrLocked) {
		t.Errorf("LockedError %v does not wrap history.ErrLocked", err)
	}

	// The database says A's lease ran out (A's own clock says it is sure).
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "UPDATE musepi_nodes SET lease_until = now() - interval '1 second' WHERE node = $1", a.Node()); err != nil {
		t.Fatal(err)
	}
	before := la.Epoch()
	if err := la.Fence(ctx); err != nil || la.Epoch() != before+1 {
		t.Fatalf("Fence with the lease lapsed in the database = %v at epoch %d, want the session re-claimed at epoch %d", err, la.Epoch(), before+1)
	}

	lb, _, err := b.Takeover(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if err := la.Hold(ctx); err != nil {
		t.Fatalf("Hold under a sure lease = %v, want nil (it asks nothing)", err)
	}
	if err := la.Fence(ctx); !errors.Is(err, history.ErrTaken) {
		t.Fatalf("Fence after b's takeover = %v, want taken", err)
	}
	checkFenced(t, la.Append(user(1, "stale")), "append")
}

// A node that gives its lease up (the cluster dropped it) frees its
// sessions at once: another node opens them without waiting for the
// lease, which the dropped node can renew no more.
func TestAbandonFreesTheSessionsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := server.NewDatabase(t)
	a := connect(t, url, "node-a", pgstore.WithLease(time.Minute))
	b := connect(t, url, "node-b")
	la, _, err := a.OpenContext(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Append(user(1, "A")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Open("s"); !errors.Is(err, history.ErrLocked) {
		t.Fatalf("Open while A holds its lease = %v, want ErrLocked", err)
	}
	for range 2 { // the second call does nothing
		if err := a.Abandon(ctx); err != nil {
			t.Fatalf("Abandon = %v", err)
		}
	}
	lb, _, err := b.Open("s")
	if err != nil {
		t.Fatalf("Open right after A gave its lease up = %v, want the session", err)
	}
	defer lb.Close()
	if err := a.RenewLease(ctx); !errors.Is(err, pgstore.ErrAbandoned) {
		t.Errorf("A's RenewLease after Abandon = %v, want ErrAbandoned", err)
	}
	if a.LeaseSure() {
		t.Error("A's LeaseSure after Abandon = true")
	}
	if err := la.Hold(ctx); err == nil {
		t.Error("A's Hold after Abandon = nil, want an error")
	}
	checkFenced(t, la.Append(user(2, "A after its lease")), "append")
	if err := lb.Append(user(2, "B")); err != nil {
		t.Fatal(err)
	}
}
