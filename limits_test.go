package musepi_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
)

// Each limit is answered with a clear *LimitError, and the runtime goes on.
func TestLimits(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()),
		musepi.WithLimits(musepi.Limits{Sessions: 2, PromptsInFlight: 1, PromptBytes: 16}))
	ctx := context.Background()
	a, _ := h.session()
	b, _ := h.session()

	t.Run("sessions", func(t *testing.T) {
		_, err := h.rt.NewSession(ctx, musepi.WithModel("p/m"))
		var le *musepi.LimitError
		if !errors.Is(err, musepi.ErrLimitExceeded) || !errors.As(err, &le) || le.Limit != "sessions" || le.Max != 2 {
			t.Fatalf("third session: %v", err)
		}
		if !strings.Contains(err.Error(), "at most 2 sessions") {
			t.Fatalf("message %q", err)
		}
	})
	t.Run("prompt bytes", func(t *testing.T) {
		_, err := a.Prompt(ctx, strings.Repeat("x", 17))
		if !errors.Is(err, musepi.ErrLimitExceeded) || !strings.Contains(err.Error(), "at most 16 prompt bytes") {
			t.Fatalf("long prompt: %v", err)
		}
	})
	t.Run("prompts in flight", func(t *testing.T) {
		h.p.SetScript(a.ID(), provider.Outcome{Block: true})
		h.p.SetScript(b.ID(), answer("b"))
		ch := h.prompt(a, "blocks")
		_, err := b.Prompt(ctx, "second")
		if !errors.Is(err, musepi.ErrLimitExceeded) || !strings.Contains(err.Error(), "at most 1 prompts in flight") {
			t.Fatalf("second prompt in flight: %v", err)
		}
		a.Abort()
		h.run()
		if r := h.settle(ch); !errors.Is(r.err, musepi.ErrAborted) {
			t.Fatalf("blocked prompt: %v", r.err)
		}
		// The slot is free again.
		ch = h.prompt(b, "again")
		h.run()
		if r := h.settle(ch); r.err != nil {
			t.Fatalf("prompt after the limit cleared: %v", r.err)
		}
	})
}
