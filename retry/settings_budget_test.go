package retry

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
)

// The `retry.budget` group on the wire: each field set overrides its default.
func TestSettingsFromProtoBudget(t *testing.T) {
	withBudget := func(b *messages.RetryBudget) *messages.RetrySettings { return &messages.RetrySettings{Budget: b} }
	overrides := []struct {
		name  string
		proto *messages.RetrySettings
		want  func(*BudgetSettings)
	}{
		{"empty budget message gives the defaults", withBudget(&messages.RetryBudget{}), func(*BudgetSettings) {}},
		{"enabled only", withBudget(&messages.RetryBudget{Enabled: ptr(true)}), func(b *BudgetSettings) { b.Enabled = true }},
		{"enabled=false", withBudget(&messages.RetryBudget{Enabled: ptr(false)}), func(*BudgetSettings) {}},
		{"max_tokens only", withBudget(&messages.RetryBudget{MaxTokens: ptr(20.0)}), func(b *BudgetSettings) { b.MaxTokens = 20 }},
		{"token_ratio only", withBudget(&messages.RetryBudget{TokenRatio: ptr(0.5)}), func(b *BudgetSettings) { b.TokenRatio = 0.5 }},
		{"probe_interval_ms only", withBudget(&messages.RetryBudget{ProbeIntervalMs: ptr(int64(100))}),
			func(b *BudgetSettings) { b.ProbeInterval = 100 * time.Millisecond }},
		{"release_window_ms only", withBudget(&messages.RetryBudget{ReleaseWindowMs: ptr(int64(2500))}),
			func(b *BudgetSettings) { b.ReleaseWindow = 2500 * time.Millisecond }},
		{"release_window_ms 0", withBudget(&messages.RetryBudget{Enabled: ptr(true), ReleaseWindowMs: ptr(int64(0))}),
			func(b *BudgetSettings) { b.Enabled = true; b.ReleaseWindow = 0 }},
		{"huge probe_interval_ms saturates", withBudget(&messages.RetryBudget{ProbeIntervalMs: ptr(int64(math.MaxInt64))}),
			func(b *BudgetSettings) { b.ProbeInterval = time.Duration(math.MaxInt64) }},
		{"every field", withBudget(&messages.RetryBudget{
			Enabled: ptr(true), MaxTokens: ptr(100.0), TokenRatio: ptr(1.0), ProbeIntervalMs: ptr(int64(50)), ReleaseWindowMs: ptr(int64(3000)),
		}), func(b *BudgetSettings) {
			*b = BudgetSettings{Enabled: true, MaxTokens: 100, TokenRatio: 1, ProbeInterval: 50 * time.Millisecond, ReleaseWindow: 3 * time.Second}
		}},
		// A disabled budget is not validated, whatever its fields.
		{"disabled with bad values", withBudget(&messages.RetryBudget{MaxTokens: ptr(0.0), TokenRatio: ptr(-1.0), ProbeIntervalMs: ptr(int64(0)), ReleaseWindowMs: ptr(int64(-1))}),
			func(b *BudgetSettings) {
				b.MaxTokens, b.TokenRatio, b.ProbeInterval, b.ReleaseWindow = 0, -1, 0, -time.Millisecond
			}},
	}
	for _, tt := range overrides {
		t.Run(tt.name, func(t *testing.T) {
			want := DefaultSettings()
			tt.want(&want.Budget)
			got, err := SettingsFromProto(tt.proto)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("SettingsFromProto(%v) = %+v, %v; want %+v, nil", tt.proto, got, err, want)
			}
		})
	}
	t.Run("the budget does not touch the other fields", func(t *testing.T) {
		got, err := SettingsFromProto(&messages.RetrySettings{MaxRetries: ptr(int32(3)), Budget: &messages.RetryBudget{Enabled: ptr(true)}})
		want := DefaultSettings()
		want.MaxRetries = 3
		want.Budget.Enabled = true
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("SettingsFromProto = %+v, %v; want %+v, nil", got, err, want)
		}
	})

	invalid := []struct {
		name  string
		proto *messages.RetryBudget
		field string
	}{
		{"max_tokens 0", &messages.RetryBudget{Enabled: ptr(true), MaxTokens: ptr(0.0)}, "retry.budget.maxTokens"},
		{"max_tokens 2e6", &messages.RetryBudget{Enabled: ptr(true), MaxTokens: ptr(2e6)}, "retry.budget.maxTokens"},
		{"token_ratio 0", &messages.RetryBudget{Enabled: ptr(true), TokenRatio: ptr(0.0)}, "retry.budget.tokenRatio"},
		{"token_ratio above max_tokens", &messages.RetryBudget{Enabled: ptr(true), MaxTokens: ptr(2.0), TokenRatio: ptr(3.0)}, "retry.budget.tokenRatio"},
		{"probe_interval_ms 0", &messages.RetryBudget{Enabled: ptr(true), ProbeIntervalMs: ptr(int64(0))}, "retry.budget.probeIntervalMs"},
		{"huge negative probe_interval_ms", &messages.RetryBudget{Enabled: ptr(true), ProbeIntervalMs: ptr(int64(math.MinInt64))}, "retry.budget.probeIntervalMs"},
		{"release_window_ms -1", &messages.RetryBudget{Enabled: ptr(true), ReleaseWindowMs: ptr(int64(-1))}, "retry.budget.releaseWindowMs"},
	}
	for _, tt := range invalid {
		t.Run("invalid "+tt.name, func(t *testing.T) {
			_, err := SettingsFromProto(&messages.RetrySettings{Budget: tt.proto})
			var se *SettingsError
			if !errors.As(err, &se) || se.Field != tt.field {
				t.Errorf("SettingsFromProto(%v) error = %v; want a *SettingsError for %s", tt.proto, err, tt.field)
			}
		})
	}
}

// Settings -> Proto -> SettingsFromProto keeps the budget.
func TestSettingsProtoBudgetRoundTrip(t *testing.T) {
	tests := []struct {
		name   string
		budget BudgetSettings
	}{
		{"defaults (off)", DefaultBudgetSettings()},
		{"enabled defaults", enabledBudget()},
		{"enabled, every value changed", BudgetSettings{
			Enabled: true, MaxTokens: 42.5, TokenRatio: 0.25, ProbeInterval: 125 * time.Millisecond, ReleaseWindow: 0,
		}},
		{"enabled, bounds", BudgetSettings{
			Enabled: true, MaxTokens: 1e6, TokenRatio: 1e6, ProbeInterval: time.Millisecond, ReleaseWindow: time.Hour,
		}},
		{"off with changed values", BudgetSettings{
			Enabled: false, MaxTokens: 3, TokenRatio: 2, ProbeInterval: time.Second, ReleaseWindow: 5 * time.Second,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			s.Budget = tt.budget
			p := s.Proto()
			b := p.GetBudget()
			if b == nil || b.Enabled == nil || b.MaxTokens == nil || b.TokenRatio == nil || b.ProbeIntervalMs == nil || b.ReleaseWindowMs == nil {
				t.Fatalf("Proto().Budget = %v; want every field set", b)
			}
			if b.GetEnabled() != tt.budget.Enabled || b.GetMaxTokens() != tt.budget.MaxTokens || b.GetTokenRatio() != tt.budget.TokenRatio ||
				b.GetProbeIntervalMs() != tt.budget.ProbeInterval.Milliseconds() || b.GetReleaseWindowMs() != tt.budget.ReleaseWindow.Milliseconds() {
				t.Errorf("Proto().Budget = %v; want %+v", b, tt.budget)
			}
			got, err := SettingsFromProto(p)
			if err != nil || !reflect.DeepEqual(got, s) {
				t.Errorf("SettingsFromProto(Proto()) = %+v, %v; want %+v, nil", got.Budget, err, s.Budget)
			}
		})
	}
	t.Run("Proto does not alias the settings", func(t *testing.T) {
		s := DefaultSettings()
		s.Budget = enabledBudget()
		p := s.Proto()
		s.Budget.Enabled, s.Budget.MaxTokens, s.Budget.TokenRatio = false, 99, 9
		if b := p.GetBudget(); !b.GetEnabled() || b.GetMaxTokens() != 10 || b.GetTokenRatio() != 0.1 {
			t.Errorf("Proto().Budget = %v after the Settings changed; want a copy", b)
		}
	})
}

// Settings.Validate reports the budget's errors, after the scalar fields
// and before the fallback chains.
func TestSettingsValidateBudget(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Settings)
		field  string // "" means valid
	}{
		{"budget on, defaults", func(s *Settings) { s.Budget.Enabled = true }, ""},
		{"budget off, bad values", func(s *Settings) { s.Budget = BudgetSettings{MaxTokens: -1, ReleaseWindow: -1} }, ""},
		{"maxTokens", func(s *Settings) { s.Budget.Enabled = true; s.Budget.MaxTokens = 0 }, "retry.budget.maxTokens"},
		{"tokenRatio", func(s *Settings) { s.Budget.Enabled = true; s.Budget.TokenRatio = 11 }, "retry.budget.tokenRatio"},
		{"probeInterval", func(s *Settings) { s.Budget.Enabled = true; s.Budget.ProbeInterval = 0 }, "retry.budget.probeIntervalMs"},
		{"releaseWindow", func(s *Settings) { s.Budget.Enabled = true; s.Budget.ReleaseWindow = -time.Millisecond }, "retry.budget.releaseWindowMs"},
		{"revert policy before budget", func(s *Settings) {
			s.FallbackRevertPolicy = "x"
			s.Budget.Enabled, s.Budget.MaxTokens = true, 0
		}, "retry.fallbackRevertPolicy"},
		{"budget before fallback chains", func(s *Settings) {
			s.Budget.Enabled, s.Budget.ProbeInterval = true, 0
			s.FallbackChains = map[string][]string{"default": {"gpt-4o"}}
		}, "retry.budget.probeIntervalMs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			tt.mutate(&s)
			checkSettingsError(t, s.Validate(), tt.field)
		})
	}
}
