package musepi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

var start = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// harness is a runtime on a virtual clock with a scripted provider "p".
type harness struct {
	t     *testing.T
	clk   *clock.Virtual
	rt    *musepi.Runtime
	p     *provider.Scripted
	other *provider.Scripted // provider "q", for fallback chains
}

func newHarness(t *testing.T, opts ...musepi.Option) *harness {
	t.Helper()
	return newHarnessCreds(t, nil, opts...)
}

// newHarnessCreds is newHarness with credentials for provider "p".
func newHarnessCreds(t *testing.T, creds []musepi.Credential, opts ...musepi.Option) *harness {
	t.Helper()
	return newHarnessAt(t, start, creds, opts...)
}

// newHarnessAt is newHarnessCreds with the virtual clock starting at at.
func newHarnessAt(t *testing.T, at time.Time, creds []musepi.Credential, opts ...musepi.Option) *harness {
	t.Helper()
	h := &harness{t: t, clk: clock.NewVirtual(at), p: provider.NewScripted(), other: provider.NewScripted()}
	base := []musepi.Option{
		musepi.WithClock(h.clk),
		musepi.WithJitterSource(func() retry.Source { return nominal{} }),
		musepi.WithProvider("p", h.p, creds...),
		musepi.WithProvider("q", h.other),
	}
	rt, err := musepi.NewRuntime(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.rt = rt
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return h
}

// nominal is a jitter source giving the nominal (un-jittered) backoff.
type nominal struct{}

func (nominal) Float64() float64 { return 1 }

// noFallback is the default settings with model fallback off.
func noFallback() retry.Settings {
	s := retry.DefaultSettings()
	s.ModelFallback = false
	return s
}

// session starts a session on model p/m (unless opts say otherwise) with a recorder.
func (h *harness) session(opts ...musepi.SessionOption) (*musepi.Session, *recorder) {
	h.t.Helper()
	s, err := h.rt.NewSession(context.Background(), append([]musepi.SessionOption{musepi.WithModel("p/m")}, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	rec := &recorder{}
	s.Subscribe(rec.add)
	return s, rec
}

type result struct {
	msg *musepi.AssistantMessage
	err error
}

// prompt starts s.Prompt in a goroutine and waits until the session has
// taken it (so that the virtual clock sees the work).
func (h *harness) prompt(s *musepi.Session, text string) <-chan result {
	h.t.Helper()
	ch := make(chan result, 1)
	gen := s.Generation()
	go func() {
		msg, err := s.Prompt(context.Background(), text)
		ch <- result{msg, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.Generation() == gen && len(ch) == 0 {
		if time.Now().After(deadline) {
			h.t.Fatal("the session never took the prompt")
		}
		time.Sleep(100 * time.Microsecond)
	}
	return ch
}

// run advances virtual time until nothing is left to do.
func (h *harness) run() {
	h.t.Helper()
	h.runWithin(30 * time.Second)
}

// runWithin is run with a wall-clock bound of limit.
func (h *harness) runWithin(limit time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := h.clk.RunUntilIdle(ctx); err != nil {
		h.t.Fatalf("run: %v", err)
	}
}

// advance moves virtual time by d.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.clk.Advance(ctx, d); err != nil {
		h.t.Fatalf("advance: %v", err)
	}
}

// settle waits for a prompt's result.
func (h *harness) settle(ch <-chan result) result {
	h.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		h.t.Fatal("prompt did not return")
		return result{}
	}
}

// pending reports whether the prompt has not returned (after the system went idle).
func pending(ch <-chan result) bool {
	select {
	case <-time.After(50 * time.Millisecond):
		return true
	case r := <-ch:
		_ = r
		return false
	}
}

// recorder keeps a session's events.
type recorder struct {
	mu     sync.Mutex
	events []musepi.Event
}

func (r *recorder) add(e musepi.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// seqs returns the event sequence numbers in delivery order.
func (r *recorder) seqs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]uint64, len(r.events))
	for i, e := range r.events {
		out[i] = e.Header().Seq
	}
	return out
}

// lastSeq is the sequence number of the last event received.
func (r *recorder) lastSeq() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return 0
	}
	return r.events[len(r.events)-1].Header().Seq
}

// lines renders the retry-relevant events as script lines.
func (r *recorder) lines(types ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := map[string]bool{}
	for _, t := range types {
		keep[t] = true
	}
	var out []string
	for _, e := range r.events {
		if len(types) > 0 && !keep[e.Type()] {
			continue
		}
		out = append(out, render(e))
	}
	return out
}

func render(e musepi.Event) string {
	switch p := e.(type) {
	case musepi.AutoRetryStart:
		return fmt.Sprintf("auto_retry_start %d/%d delay=%dms class=%s", p.Attempt, p.MaxAttempts, p.Delay.Milliseconds(), p.ErrorClass)
	case musepi.AutoRetryEnd:
		s := fmt.Sprintf("auto_retry_end success=%t attempt=%d", p.Success, p.Attempt)
		if !p.Success {
			s += fmt.Sprintf(" error=%q", p.FinalError)
		}
		return s
	case musepi.AgentEnd:
		return fmt.Sprintf("agent_end willRetry=%t", p.WillRetry)
	case musepi.AgentSettled:
		return fmt.Sprintf("agent_settled success=%t", p.Success)
	case musepi.RetryFallbackApplied:
		return fmt.Sprintf("retry_fallback_applied %s -> %s (%s)", p.From, p.To, p.Role)
	case musepi.RetryFallbackSucceeded:
		return fmt.Sprintf("retry_fallback_succeeded %s (%s)", p.Model, p.Role)
	case musepi.ModelChanged:
		return fmt.Sprintf("model_change %s -> %s (%s)", p.From, p.To, p.Reason)
	}
	return e.Type()
}

func expectLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  got:  %s\n  want: %s", strings.Join(got, "\n        "), strings.Join(want, "\n        "))
	}
}

// Outcomes for scripts.
func fail(status int, text string, headers ...string) provider.Outcome {
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return provider.Outcome{Message: provider.Failure(status, text, h)}
}

func answer(text string) provider.Outcome {
	return provider.Outcome{Deltas: []provider.Delta{{Kind: "text", Text: text}}, Message: provider.Text(text)}
}
