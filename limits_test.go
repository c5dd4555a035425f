package musepi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
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

// A turn that streams more than WithMaxResponseBytes ends with a clear
// error that is not retried; deltas past the bound are not delivered.
func TestMaxResponseBytes(t *testing.T) {
	chunk := strings.Repeat("x", 100)
	tenChunks := provider.Outcome{Message: provider.Text(strings.Repeat(chunk, 10))}
	for range 10 {
		tenChunks.Deltas = append(tenChunks.Deltas, provider.Delta{Kind: "text", Text: chunk})
	}
	tests := []struct {
		name    string
		max     int
		wantErr bool
	}{
		{"within the bound", 1000, false},
		{"over the bound", 350, true},
		{"thinking counts too", 1001, true},
		{"no bound", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithMaxResponseBytes(tt.max))
			out := tenChunks
			if strings.HasPrefix(tt.name, "thinking") {
				out.Deltas = append(slices.Clone(out.Deltas), provider.Delta{Kind: "thinking", Text: "hm"})
			}
			h.p.SetDefault(out)
			s, rec := h.session()
			ch := h.prompt(s, "hi")
			h.run()
			r := h.settle(ch)
			if !tt.wantErr {
				if r.err != nil {
					t.Fatalf("prompt: %v", r.err)
				}
				return
			}
			if !errors.Is(r.err, musepi.ErrPromptFailed) || !strings.Contains(r.err.Error(), "response too large") ||
				!strings.Contains(r.err.Error(), fmt.Sprint(tt.max)) {
				t.Fatalf("prompt error %v, want ErrPromptFailed with response too large and the bound", r.err)
			}
			if n := len(h.p.Calls()); n != 1 {
				t.Errorf("%d provider calls, want 1: the error must not be retried", n)
			}
			streamed := 0
			for _, u := range rec.ofType("message_update") {
				streamed += len(u.(musepi.MessageUpdate).Delta)
			}
			if streamed > tt.max {
				t.Errorf("%d bytes of deltas delivered, more than the bound %d", streamed, tt.max)
			}
			expectLines(t, rec.lines("agent_end", "auto_retry_start", "agent_settled"),
				"agent_end willRetry=false", "agent_settled success=false")
		})
	}
}

// NewRuntime refuses options it cannot honour, naming the option: a nil
// provider, one given twice, an empty name, a fallback target whose
// provider is not there.
func TestNewRuntimeRefusesBadOptions(t *testing.T) {
	p := provider.NewScripted()
	chains := retry.DefaultSettings()
	chains.FallbackChains = map[string][]string{"default": {"p/m2", "nowhere/m"}}
	tests := []struct {
		name string
		opts []musepi.Option
		want string
	}{
		{"nil provider", []musepi.Option{musepi.WithProvider("x", nil)}, `WithProvider("x"): nil provider`},
		{"duplicate provider", []musepi.Option{musepi.WithProvider("p", p), musepi.WithProvider("p", p)}, `WithProvider("p"): provider given twice`},
		{"empty name", []musepi.Option{musepi.WithProvider("", p)}, "WithProvider: empty provider name"},
		{"unknown fallback target", []musepi.Option{musepi.WithProvider("p", p), musepi.WithRetrySettings(chains)},
			`retry.fallbackChains.default[1] "nowhere/m": no provider "nowhere"`},
		{"zero settings", []musepi.Option{musepi.WithProvider("p", p), musepi.WithRetrySettings(retry.Settings{})}, "settings are empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, err := musepi.NewRuntime(tt.opts...)
			if err == nil {
				_ = rt.Shutdown(context.Background())
				t.Fatalf("NewRuntime accepted the options")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}
