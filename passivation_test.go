package musepi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musepi/musepi"
)

// A session waiting out a backoff of at least WithPassivateAfter leaves
// its actors (as a virtual actor is passivated) and comes back when its
// scheduler wakes it: the prompt completes with the same events as a
// session that kept its actors, and an idle runtime has nothing pending.
func TestPassivatedSessionComesBackOnTime(t *testing.T) {
	run := func(after time.Duration) (lines []string, passivated bool) {
		h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithPassivateAfter(after))
		s, rec := h.session()
		h.p.SetScript(s.ID(), fail(429, "429 Too Many Requests", "retry-after", "30"), answer("hello"))
		ch := h.prompt(s, "hi")
		h.advance(10 * time.Second) // in the 30 s backoff
		passivated = !musepi.HasActor(s)
		h.advance(21 * time.Second)
		expectAnswer(t, h.settle(ch), "hello")
		if n := h.clk.Pending(); n != 0 {
			t.Errorf("%d timers pending once the prompt settled", n)
		}
		return rec.lines(retryEvents...), passivated
	}
	kept, p1 := run(0)
	left, p2 := run(time.Second)
	if p1 || !p2 {
		t.Fatalf("actor left during the backoff: %t with passivation off, %t with it on; want false, true", p1, p2)
	}
	expectLines(t, left, kept...)
}

// While a session has left its actors, a message (an abort, a history
// read, Close) starts them again with its state: AbortRetry cancels the
// backoff at once, with no wake left pending; Close ends the waiting
// prompt with ErrShutdown.
func TestPassivatedSessionTakesMessages(t *testing.T) {
	setup := func(t *testing.T) (*harness, *musepi.Session, <-chan result) {
		h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithPassivateAfter(time.Second))
		s, _ := h.session()
		h.p.SetScript(s.ID(), fail(429, "429 Too Many Requests", "retry-after", "30"), answer("hello"))
		ch := h.prompt(s, "hi")
		h.advance(10 * time.Second)
		if musepi.HasActor(s) {
			t.Fatal("the session kept its actor in a 30 s backoff")
		}
		return h, s, ch
	}
	t.Run("abort_retry", func(t *testing.T) {
		h, s, ch := setup(t)
		s.AbortRetry()
		h.run()
		expectErr(t, h.settle(ch), musepi.ErrRetryCancelled)
		if n := h.clk.Pending(); n != 0 {
			t.Errorf("%d timers pending after the cancelled backoff", n)
		}
	})
	t.Run("history", func(t *testing.T) {
		h, s, ch := setup(t)
		entries, err := s.History(context.Background())
		if err != nil || len(entries) != 2 {
			t.Fatalf("History = %d entries, %v; want the prompt and the failed turn", len(entries), err)
		}
		h.advance(21 * time.Second)
		expectAnswer(t, h.settle(ch), "hello")
	})
	t.Run("close", func(t *testing.T) {
		h, s, ch := setup(t)
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		r := h.settle(ch)
		if !errors.Is(r.err, musepi.ErrShutdown) || !errors.Is(r.err, musepi.ErrSessionClosed) {
			t.Fatalf("prompt after Close = %v, want ErrShutdown and ErrSessionClosed", r.err)
		}
	})
}
