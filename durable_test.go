package musepi_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi"
	hist "github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// procStore is one process's handle on a store that outlives it: the
// history.Store a runtime is given, over a store shared with the next
// process. die drops the process's open logs as a kill -9 would (a file
// store's locks die with their process): its runtime's later writes fail
// with ErrClosed and write nothing, and the sessions may be opened again
// elsewhere. Its Close leaves the shared store open.
type procStore struct {
	hist.Store
	mu   sync.Mutex
	logs []hist.Log
}

func (p *procStore) Open(id string) (hist.Log, []*messages.Entry, error) {
	l, entries, err := p.Store.Open(id)
	if err == nil {
		p.mu.Lock()
		p.logs = append(p.logs, l)
		p.mu.Unlock()
	}
	return l, entries, err
}

func (p *procStore) die() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		l.Close()
	}
}

func (p *procStore) Close() error { return nil }

// A runtime dies during a backoff (its logs dropped, its clock stopped: it
// never runs again); a second runtime on the same store opens the session:
// the chain resumes from the session's record at the same attempt (the
// next auto_retry_start is attempt n+1), the backoff runs for what is left
// of it, or at once when its due time has passed, and the prompt completes
// for a caller that attaches. The history has every turn once, seq
// contiguous, and no "interrupted" marker.
func TestDurableChainResumesInAnotherRuntime(t *testing.T) {
	quiet := musepi.WithLogger(slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		name  string
		later time.Duration // the second runtime's clock, after the death
		wait  time.Duration // what is left of the 1 s backoff there
		// attachLate: the caller attaches only after the prompt completed
		// with nobody attached (its result is kept).
		attachLate bool
	}{
		{"remaining delay", 300 * time.Millisecond, 700 * time.Millisecond, false},
		{"past due fires at once", 5 * time.Second, 0, false},
		{"attach after it completed", 300 * time.Millisecond, 700 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := hist.NewMemoryStore(hist.WithRecords())
			t.Cleanup(func() { mem.Close() })
			first := &procStore{Store: mem}
			a := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithHistoryStore(first), quiet)
			s, recA := a.session(musepi.WithSessionID("chat"))
			a.p.SetScript("chat", fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"))
			orphaned := a.prompt(s, "hi")
			a.advance(501 * time.Millisecond) // attempt 1 fails, its 1 s backoff starts
			// The second backoff (1 s) is armed, and its record written, when
			// the session publishes when it ends.
			waitFor(t, "the second backoff", func() bool { return a.rt.Stats().WaitingUntil.After(start.Add(time.Second)) })
			expectLines(t, recA.lines("auto_retry_start"),
				"auto_retry_start 1/10 delay=500ms class=transient", "auto_retry_start 2/10 delay=1000ms class=transient")
			died := a.clk.Now()
			first.die()

			b := newHarnessAt(t, died.Add(tc.later), nil, musepi.WithRetrySettings(noFallback()),
				musepi.WithHistoryStore(&procStore{Store: mem}), quiet)
			b.p.SetScript("chat", fail(503, "503 Service Unavailable"), answer("recovered"))
			s2, err := b.rt.NewSession(context.Background(), musepi.WithSessionID("chat"), musepi.WithModel("p/m"))
			if err != nil {
				t.Fatal(err)
			}
			recB := &recorder{}
			s2.Subscribe(recB.add)
			if !s2.Busy() || !s2.IsRetrying() {
				t.Fatalf("resumed session: busy %v, retrying %v; want a chain in backoff", s2.Busy(), s2.IsRetrying())
			}
			attached := make(chan result, 1)
			attach := func() {
				msg, err := s2.Attach(context.Background())
				attached <- result{msg, err}
			}
			if !tc.attachLate {
				go attach()
			}
			if tc.wait > 0 {
				b.advance(tc.wait - time.Millisecond)
				if n := len(b.p.Calls()); n != 0 {
					t.Fatalf("%d calls before the backoff's remaining %v", n, tc.wait)
				}
			}
			b.run()
			if tc.attachLate {
				waitFor(t, "the prompt to settle", func() bool { return !s2.Busy() })
				go attach()
			}
			r := b.settle(attached)
			if r.err != nil || r.msg.Text() != "recovered" {
				t.Fatalf("attached: %v, %v", r.msg, r.err)
			}
			expectLines(t, recB.lines(retryEvents...),
				"agent_end willRetry=true",
				"auto_retry_start 3/10 delay=2000ms class=transient",
				"agent_end willRetry=false",
				"auto_retry_end success=true attempt=3",
				"agent_settled success=true")
			entries, err := s2.History(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			expectSeq(t, entries)
			expectKinds(t, "history", entries, "user:hi",
				"assistant-error:503 Service Unavailable", "assistant-error:503 Service Unavailable",
				"assistant-error:503 Service Unavailable", "assistant:recovered")
			if !pending(orphaned) {
				t.Error("the dead runtime's caller got an answer")
			}
		})
	}
}

// waitFor polls cond (real time) for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// HandOver makes a session leave a live runtime without ending its prompt:
// in a backoff, its caller gets ErrHandedOver and a second runtime opens
// the session and goes on at the next attempt; idle, it simply moves. A
// store that keeps no records cannot hand a chain over, and says so.
func TestHandOver(t *testing.T) {
	quiet := musepi.WithLogger(slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		name    string
		records bool
		backoff bool // hand over in the second backoff (else idle, answered)
		wantErr string
	}{
		{"in a backoff", true, true, ""},
		{"idle", true, false, ""},
		{"a store without records", false, true, "keeps no records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []hist.MemoryOption
			if tc.records {
				opts = append(opts, hist.WithRecords())
			}
			mem := hist.NewMemoryStore(opts...)
			t.Cleanup(func() { mem.Close() })
			a := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithHistoryStore(&procStore{Store: mem}), quiet)
			s, _ := a.session(musepi.WithSessionID("chat"))
			var caller <-chan result
			if tc.backoff {
				a.p.SetScript("chat", fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"))
				caller = a.prompt(s, "hi")
				a.advance(501 * time.Millisecond)
				waitFor(t, "the second backoff", func() bool { return a.rt.Stats().WaitingUntil.After(start.Add(time.Second)) })
			} else {
				a.p.SetScript("chat", answer("hello"))
				if r := a.runPrompt(s, "hi"); r.err != nil {
					t.Fatal(r.err)
				}
			}
			err := s.HandOver(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("HandOver = %v, want %q", err, tc.wantErr)
				}
				if !s.Busy() {
					t.Error("the session stopped although it was not handed over")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := a.rt.Session("chat"); ok {
				t.Error("the session is still in the runtime that handed it over")
			}
			if _, err := s.Prompt(context.Background(), "again"); !errors.Is(err, musepi.ErrSessionClosed) {
				t.Errorf("prompt after the hand-over = %v, want ErrSessionClosed", err)
			}
			if tc.backoff {
				if r := a.settle(caller); !errors.Is(r.err, musepi.ErrHandedOver) {
					t.Fatalf("the waiting caller got %v, want ErrHandedOver", r.err)
				}
			}

			b := newHarnessAt(t, a.clk.Now(), nil, musepi.WithRetrySettings(noFallback()),
				musepi.WithHistoryStore(&procStore{Store: mem}), quiet)
			b.p.SetScript("chat", fail(503, "503 Service Unavailable"), answer("recovered"))
			s2, err := b.rt.NewSession(context.Background(), musepi.WithSessionID("chat"), musepi.WithModel("p/m"))
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"user:hi", "assistant:hello"}
			if tc.backoff {
				rec := &recorder{}
				s2.Subscribe(rec.add)
				attached := make(chan result, 1)
				go func() {
					msg, err := s2.Attach(context.Background())
					attached <- result{msg, err}
				}()
				b.run()
				if r := b.settle(attached); r.err != nil || r.msg.Text() != "recovered" {
					t.Fatalf("attached: %v, %v", r.msg, r.err)
				}
				expectLines(t, rec.lines("auto_retry_start", "auto_retry_end"),
					"auto_retry_start 3/10 delay=2000ms class=transient", "auto_retry_end success=true attempt=3")
				want = []string{"user:hi", "assistant-error:503 Service Unavailable", "assistant-error:503 Service Unavailable",
					"assistant-error:503 Service Unavailable", "assistant:recovered"}
			} else if s2.Busy() {
				t.Fatal("an idle session came back busy")
			}
			entries, err := s2.History(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			expectSeq(t, entries)
			expectKinds(t, "history", entries, want...)
		})
	}
}

// A hand-over asked while a turn streams waits for the turn: the turn's
// failure is recorded and its backoff armed before the session leaves, so
// the next runtime goes on at attempt 2, and no turn is lost.
func TestHandOverWaitsForTheTurn(t *testing.T) {
	mem := hist.NewMemoryStore(hist.WithRecords())
	t.Cleanup(func() { mem.Close() })
	quiet := musepi.WithLogger(slog.New(slog.DiscardHandler))
	a := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithHistoryStore(&procStore{Store: mem}), quiet)
	s, _ := a.session(musepi.WithSessionID("chat"))
	gate, streaming := make(chan struct{}), make(chan struct{}, 1)
	a.p.OnCall(func(provider.Request) {
		streaming <- struct{}{}
		<-gate
	})
	a.p.SetScript("chat", fail(503, "503 Service Unavailable"))
	caller := a.prompt(s, "hi")
	<-streaming
	handed := make(chan error, 1)
	go func() { handed <- s.HandOver(context.Background()) }()
	select {
	case err := <-handed:
		t.Fatalf("HandOver returned while the turn streamed: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	if err := <-handed; err != nil {
		t.Fatal(err)
	}
	if r := a.settle(caller); !errors.Is(r.err, musepi.ErrHandedOver) {
		t.Fatalf("the caller got %v, want ErrHandedOver", r.err)
	}

	b := newHarnessAt(t, a.clk.Now(), nil, musepi.WithRetrySettings(noFallback()),
		musepi.WithHistoryStore(&procStore{Store: mem}), quiet)
	b.p.SetScript("chat", answer("recovered"))
	s2, err := b.rt.NewSession(context.Background(), musepi.WithSessionID("chat"), musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s2.Subscribe(rec.add)
	attached := make(chan result, 1)
	go func() {
		msg, err := s2.Attach(context.Background())
		attached <- result{msg, err}
	}()
	b.run()
	if r := b.settle(attached); r.err != nil || r.msg.Text() != "recovered" {
		t.Fatalf("attached: %v, %v", r.msg, r.err)
	}
	expectLines(t, rec.lines("auto_retry_end"), "auto_retry_end success=true attempt=1")
	entries, err := s2.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	expectSeq(t, entries)
	expectKinds(t, "history", entries, "user:hi", "assistant-error:503 Service Unavailable", "assistant:recovered")
}
