package musepi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	hist "github.com/musepi/musepi/history"
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
// provider is not there, zero or negative settings, nil values.
func TestNewRuntimeRefusesBadOptions(t *testing.T) {
	p := provider.NewScripted()
	chains := retry.DefaultSettings()
	chains.FallbackChains = map[string][]string{"default": {"p/m2", "nowhere/m"}}
	negRetries, negDelay := retry.DefaultSettings(), retry.DefaultSettings()
	negRetries.MaxRetries, negDelay.BaseDelay = -1, -time.Second
	run := func(context.Context, string) (string, error) { return "", nil }
	tests := []struct {
		name string
		opts []musepi.Option
		want string
	}{
		{"nil provider", []musepi.Option{musepi.WithProvider("x", nil)}, `WithProvider("x"): nil provider`},
		{"duplicate provider", []musepi.Option{musepi.WithProvider("p", p), musepi.WithProvider("p", p)}, `WithProvider("p"): provider given twice`},
		{"empty name", []musepi.Option{musepi.WithProvider("", p)}, "WithProvider: empty provider name"},
		{"unknown fallback target", []musepi.Option{musepi.WithProvider("p", p), musepi.WithRetrySettings(chains)},
			`WithRetrySettings: retry.fallbackChains.default[1] "nowhere/m": unknown fallback target: no provider "nowhere"`},
		{"zero settings", []musepi.Option{musepi.WithProvider("p", p), musepi.WithRetrySettings(retry.Settings{})}, "WithRetrySettings: retry: settings are empty"},
		{"negative max retries", []musepi.Option{musepi.WithProvider("p", p), musepi.WithRetrySettings(negRetries)}, "WithRetrySettings: retry.maxRetries: must be 0 or more, got -1"},
		{"negative base delay", []musepi.Option{musepi.WithProvider("p", p), musepi.WithRetrySettings(negDelay)}, "WithRetrySettings: retry.baseDelayMs: must be 0 or more"},
		{"provider name with a slash", []musepi.Option{musepi.WithProvider("a/b", p)}, `WithProvider("a/b"): a provider name cannot hold '/'`},
		{"empty credential name", []musepi.Option{musepi.WithProvider("p", p, musepi.Credential{APIKey: "k"})}, `WithProvider("p"): credential 0: empty or duplicate name`},
		{"duplicate credential", []musepi.Option{musepi.WithProvider("p", p, musepi.Credential{Name: "a", APIKey: "k"}, musepi.Credential{Name: "a", APIKey: "k2"})}, `WithProvider("p"): credential 1: empty or duplicate name "a"`},
		{"nil clock", []musepi.Option{musepi.WithClock(nil)}, "WithClock: nil clock"},
		{"negative limit", []musepi.Option{musepi.WithLimits(musepi.Limits{Sessions: 10, PromptBytes: -1})}, "WithLimits: PromptBytes is -1"},
		{"negative queue", []musepi.Option{musepi.WithEventQueueLen(-5)}, "WithEventQueueLen: negative length -5"},
		{"negative idle timeout", []musepi.Option{musepi.WithStreamIdleTimeout(-time.Second)}, "WithStreamIdleTimeout: negative timeout -1s"},
		{"negative response bound", []musepi.Option{musepi.WithMaxResponseBytes(-1)}, "WithMaxResponseBytes: negative bound -1"},
		{"tool without a name", []musepi.Option{musepi.WithTools(musepi.Tool{Run: run})}, "WithTools: a tool without a name"},
		{"tool without Run", []musepi.Option{musepi.WithTools(musepi.Tool{Name: "ls"})}, `WithTools("ls"): nil Run`},
		{"duplicate tool", []musepi.Option{musepi.WithTools(musepi.Tool{Name: "ls", Run: run}), musepi.WithTools(musepi.Tool{Name: "ls", Run: run})}, `WithTools("ls"): tool given twice`},
		{"empty history dir", []musepi.Option{musepi.WithHistoryDir("")}, "WithHistoryDir: empty directory"},
		{"unknown history sync", []musepi.Option{musepi.WithHistorySync(hist.Sync(7))}, "WithHistorySync: unknown policy 7"},
		{"nil history store", []musepi.Option{musepi.WithHistoryStore(nil)}, "WithHistoryStore: nil store"},
		{"nil jitter source", []musepi.Option{musepi.WithJitterSource(nil)}, "WithJitterSource: nil source function"},
		{"nil logger", []musepi.Option{musepi.WithLogger(nil)}, "WithLogger: nil logger"},
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
