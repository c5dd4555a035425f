package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// The runtime's durable retry chains on PostgreSQL: two runtimes, two
// Stores (nodes) on one database.

// The Store is what a runtime needs for durable timers.
var _ musepi.TimerStore = (*pgstore.Store)(nil)

type nominal struct{}

func (nominal) Float64() float64 { return 1 }

// node is a runtime on a Store, on clk (nil: the wall clock), with a
// scripted provider "p"; it is shut down at the end of the test.
func node(t *testing.T, store *pgstore.Store, clk clock.Clock, p *provider.Scripted, opts ...musepi.Option) *musepi.Runtime {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.ModelFallback = false
	base := []musepi.Option{musepi.WithHistoryStore(store), musepi.WithProvider("p", p),
		musepi.WithRetrySettings(settings), musepi.WithJitterSource(func() retry.Source { return nominal{} }),
		musepi.WithLogger(slog.New(slog.DiscardHandler))}
	if clk != nil {
		base = append(base, musepi.WithClock(clk))
	}
	rt, err := musepi.NewRuntime(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx) // a fenced or closed store's writes fail: the errors are expected
	})
	return rt
}

// inBackoff starts a prompt on a new session id of rt (on virtual clock
// clk) and advances clk until the session waits out attempt's backoff
// (the record in the database says so). The prompt's outcome comes on the
// returned channel.
func inBackoff(t *testing.T, rt *musepi.Runtime, clk *clock.Virtual, id string, steps ...time.Duration) <-chan error {
	t.Helper()
	s, err := rt.NewSession(context.Background(), musepi.WithSessionID(id), musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan error, 1)
	go func() {
		_, err := s.Prompt(context.Background(), "hi")
		out <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range steps {
		waitUntil(t, "a backoff", func() bool { return !rt.Stats().WaitingUntil.IsZero() })
		if err := clk.Advance(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the last backoff", func() bool { return !rt.Stats().WaitingUntil.IsZero() })
	return out
}

// waitUntil polls cond for up to 15 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kinds renders a history: "user", "error", "answer:text".
func kinds(entries []musepi.Entry) string {
	var out []string
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			return "seq not contiguous"
		}
		switch {
		case e.User != nil:
			out = append(out, "user")
		case e.Assistant != nil && e.Assistant.ErrorMessage != "":
			out = append(out, "error")
		case e.Assistant != nil:
			out = append(out, "answer:"+e.Assistant.Text())
		default:
			out = append(out, "other")
		}
	}
	return strings.Join(out, " ")
}

func unavailable() provider.Outcome {
	return provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)}
}

func says(text string) provider.Outcome {
	return provider.Outcome{Message: provider.Text(text)}
}

// Node a holds a session in its second backoff when node b takes it over
// (the cluster knows a is gone): b resumes the chain from the record in the
// database at attempt 3 and the prompt completes for a caller attached on
// b. Node a was not dead after all: when its timer fires, its attempt's
// write is fenced and it writes nothing; the history has every turn once.
func TestDurableChainTakeoverFencesTheStaleNode(t *testing.T) {
	t.Parallel()
	url := server.NewDatabase(t)
	sa, sb := connect(t, url, "a"), connect(t, url, "b")
	clkA := clock.NewVirtual(time.Now())
	pa, pb := provider.NewScripted(), provider.NewScripted()
	pa.SetScript("chat", unavailable(), unavailable(), says("stale"))
	pb.SetScript("chat", unavailable(), says("recovered"))
	a := node(t, sa, clkA, pa, musepi.WithTimerPoll(0))
	b := node(t, sb, nil, pb, musepi.WithTimerPoll(0))
	staleCaller := inBackoff(t, a, clkA, "chat", 501*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.NewSession(ctx, musepi.WithSessionID("chat"), musepi.WithModel("p/m")); !errors.Is(err, history.ErrLocked) {
		t.Fatalf("open while a lives = %v, want ErrLocked", err)
	}
	takeover := musepi.WithTakeover(func(ctx context.Context, id string) (history.Log, []*messages.Entry, error) {
		l, entries, err := sb.Takeover(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		return l, entries, nil
	})
	var (
		mu     sync.Mutex
		starts []int
	)
	s, err := b.NewSession(ctx, musepi.WithSessionID("chat"), musepi.WithModel("p/m"), takeover)
	if err != nil {
		t.Fatal(err)
	}
	s.Subscribe(func(e musepi.Event) {
		if st, ok := e.(musepi.AutoRetryStart); ok {
			mu.Lock()
			starts = append(starts, st.Attempt)
			mu.Unlock()
		}
	})
	msg, err := s.Attach(ctx)
	if err != nil || msg.Text() != "recovered" {
		t.Fatalf("attached on b: %v, %v", msg, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 1 || starts[0] != 3 {
		t.Errorf("b's auto_retry_start attempts %v, want 3 (a made 1 and 2)", starts)
	}

	if err := clkA.Advance(ctx, 3*time.Second); err != nil { // a's timer fires: a stale attempt
		t.Fatal(err)
	}
	select {
	case err := <-staleCaller:
		if !errors.Is(err, musepi.ErrHistory) || !strings.Contains(err.Error(), "taken over") {
			t.Errorf("a's prompt = %v, want a fenced history write", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a's prompt did not end")
	}
	entries, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(entries), "user error error error answer:recovered"; got != want {
		t.Fatalf("history %q, want %q", got, want)
	}
}

// Node a dies (its Store closed: its sessions are free at once, as after
// its lease ran out) while a session waits out a 2 s backoff; node b's
// durable timers claim the session once it is due and wake it: the chain
// goes on, the prompt completes with nobody attached, and a caller that
// attaches later gets its answer.
func TestDurableTimerWakesTheSessionOnAnotherNode(t *testing.T) {
	t.Parallel()
	url := server.NewDatabase(t)
	sa, sb := connect(t, url, "a"), connect(t, url, "b")
	clkA := clock.NewVirtual(time.Now())
	pa, pb := provider.NewScripted(), provider.NewScripted()
	pa.SetScript("chat", provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", map[string]string{"retry-after": "2"})})
	pb.SetScript("chat", says("woke"))
	a := node(t, sa, clkA, pa, musepi.WithTimerPoll(0))
	b := node(t, sb, nil, pb, musepi.WithTimerPoll(50*time.Millisecond))
	inBackoff(t, a, clkA, "chat")
	due := a.Stats().WaitingUntil
	if err := sa.Close(); err != nil { // a is gone
		t.Fatal(err)
	}

	waitUntil(t, "b to wake the session", func() bool {
		s, ok := b.Session("chat")
		return ok && !s.Busy()
	})
	if now := time.Now(); now.Before(due) {
		t.Errorf("woken at %v, before its backoff ended at %v", now, due)
	}
	s, _ := b.Session("chat")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := s.Attach(ctx)
	if err != nil || msg.Text() != "woke" {
		t.Fatalf("attached on b: %v, %v", msg, err)
	}
	entries, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(entries), "user error answer:woke"; got != want {
		t.Fatalf("history %q, want %q", got, want)
	}
	if left, err := sb.Due(ctx, time.Now().Add(time.Hour), 10); err != nil || len(left) != 0 {
		t.Fatalf("due after the wake: %v, %v; want none", left, err)
	}
}
