package musepi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musepi/musepi"
)

// asyncResult collects PromptAsync's callback, failing on a second call.
func asyncResult(t *testing.T) (func(*musepi.AssistantMessage, error), <-chan result) {
	ch := make(chan result, 2)
	return func(msg *musepi.AssistantMessage, err error) {
		ch <- result{msg, err}
		if len(ch) > 1 {
			t.Error("PromptAsync called done twice")
		}
	}, ch
}

func TestPromptAsync(t *testing.T) {
	t.Run("rides out a retry and calls done once", func(t *testing.T) {
		h := newHarness(t, musepi.WithRetrySettings(noFallback()))
		h.p.SetDefault(fail(503, "503 Service Unavailable"), answer("hello"))
		s, _ := h.session()
		done, ch := asyncResult(t)
		s.PromptAsync(context.Background(), "hi", done)
		h.run()
		r := h.settle(ch)
		if r.err != nil || r.msg.Text() != "hello" {
			t.Fatalf("PromptAsync = %v, %v; want hello", r.msg, r.err)
		}
	})
	t.Run("a cancelled context aborts the prompt", func(t *testing.T) {
		h := newHarness(t, musepi.WithRetrySettings(noFallback()))
		h.p.SetDefault(fail(503, "503 Service Unavailable"))
		s, _ := h.session()
		ctx, cancel := context.WithCancel(context.Background())
		done, ch := asyncResult(t)
		s.PromptAsync(ctx, "hi", done)
		h.advance(100 * time.Millisecond) // in the first backoff
		cancel()
		r := h.settle(ch)
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", r.err)
		}
		h.run()
		if s.Busy() {
			t.Error("session still busy after the abort")
		}
	})
	t.Run("an ended context fails at once", func(t *testing.T) {
		h := newHarness(t)
		s, _ := h.session()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done, ch := asyncResult(t)
		s.PromptAsync(ctx, "hi", done)
		if r := h.settle(ch); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", r.err)
		}
	})
	t.Run("a closed session fails", func(t *testing.T) {
		h := newHarness(t)
		s, _ := h.session()
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		done, ch := asyncResult(t)
		s.PromptAsync(context.Background(), "hi", done)
		if r := h.settle(ch); r.err == nil {
			t.Fatal("PromptAsync on a closed session succeeded")
		}
	})
}

// A context cancelled while the prompt runs has one outcome, whatever the
// prompt was doing and however the abort races with the cancellation:
// done gets context.Canceled, once, and the session is free afterwards.
func TestPromptAsyncCancelledOutcome(t *testing.T) {
	const runs = 200
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	h.p.SetDefault(fail(503, "503 Service Unavailable"))
	s, _ := h.session()
	// Where the cancellation lands: before the session took the prompt,
	// during the first turn, in the first backoff (500 ms), in the second.
	points := []time.Duration{-1, 0, 100 * time.Millisecond, 800 * time.Millisecond}
	for i := range runs {
		ctx, cancel := context.WithCancel(context.Background())
		done, ch := asyncResult(t)
		s.PromptAsync(ctx, "hi", done)
		if at := points[i%len(points)]; at >= 0 {
			h.advance(at)
		}
		cancel()
		if r := h.settle(ch); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("run %d (cancelled at %v): err = %v, want context.Canceled", i, points[i%len(points)], r.err)
		}
		h.run()
		if s.Busy() {
			t.Fatalf("run %d: session still busy after the abort", i)
		}
	}
}
