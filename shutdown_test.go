package musepi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musepi/musepi"
)

// Shutdown during a backoff: the chain ends with auto_retry_end{success:
// false}, agent_settled follows, and the waiting Prompt returns ErrShutdown.
func TestShutdownCancelsPendingBackoff(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(429, "429 Too Many Requests", "retry-after", "30"), answer("late"))
	ch := h.prompt(s, "hi")
	h.advance(time.Second)
	if !s.IsRetrying() {
		t.Fatal("the session should be in its backoff")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r := h.settle(ch)
	if !errors.Is(r.err, musepi.ErrShutdown) {
		t.Fatalf("prompt error = %v, want ErrShutdown", r.err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(rec.lines("agent_settled")) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=30000ms class=transient",
		`auto_retry_end success=false attempt=1 error="session shut down before the prompt settled"`,
		"agent_settled success=false")
	if s.IsRetrying() || s.Busy() {
		t.Fatal("state must be cleared after shutdown")
	}
}

// A call on a closed session or after Shutdown says which, with a sentinel
// errors.Is matches; it never hangs.
func TestCallsAfterCloseAndShutdown(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed, _ := h.session()
	if err := closed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := closed.Prompt(ctx, "hi"); !errors.Is(err, musepi.ErrSessionClosed) {
		t.Errorf("Prompt after Close = %v, want ErrSessionClosed", err)
	}
	if _, err := closed.Messages(ctx); !errors.Is(err, musepi.ErrSessionClosed) {
		t.Errorf("Messages after Close = %v, want ErrSessionClosed", err)
	}
	open, _ := h.session()
	if err := h.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Prompt(ctx, "hi"); !errors.Is(err, musepi.ErrRuntimeClosed) {
		t.Errorf("Prompt after Shutdown = %v, want ErrRuntimeClosed", err)
	}
	if _, err := open.History(ctx); !errors.Is(err, musepi.ErrRuntimeClosed) {
		t.Errorf("History after Shutdown = %v, want ErrRuntimeClosed", err)
	}
}
