package retry

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
)

// Spec section 4: enabled [true], maxRetries [10], baseDelayMs [500],
// maxDelayMs [300000], modelFallback [true], fallbackChains [none],
// fallbackRevertPolicy [cooldown-expiry].
func TestDefaultSettings(t *testing.T) {
	got := DefaultSettings()
	want := Settings{
		Enabled:              true,
		MaxRetries:           10,
		BaseDelay:            500 * time.Millisecond,
		MaxDelay:             300000 * time.Millisecond,
		ModelFallback:        true,
		FallbackChains:       nil,
		FallbackRevertPolicy: "cooldown-expiry",
		Budget: BudgetSettings{
			Enabled:       false,
			MaxTokens:     10,
			TokenRatio:    0.1,
			ProbeInterval: 250 * time.Millisecond,
			ReleaseWindow: time.Second,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultSettings() = %+v; want %+v", got, want)
	}
	if len(got.FallbackChains) != 0 {
		t.Errorf("DefaultSettings().FallbackChains = %v; want none", got.FallbackChains)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("DefaultSettings().Validate() = %v; want nil", err)
	}
	if RevertCooldownExpiry != "cooldown-expiry" || RevertNever != "never" {
		t.Errorf("revert policies = %q, %q; want cooldown-expiry, never", RevertCooldownExpiry, RevertNever)
	}
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Settings)
		field  string // "" means valid
	}{
		{"defaults", func(*Settings) {}, ""},
		{"maxRetries 0 is valid", func(s *Settings) { s.MaxRetries = 0 }, ""},
		{"maxDelay 0 turns the cap off", func(s *Settings) { s.MaxDelay = 0 }, ""},
		{"negative maxDelay turns the cap off", func(s *Settings) { s.MaxDelay = -time.Millisecond }, ""},
		{"baseDelay 0 is valid", func(s *Settings) { s.BaseDelay = 0 }, ""},
		{"revert policy never", func(s *Settings) { s.FallbackRevertPolicy = RevertNever }, ""},
		{"valid chains", func(s *Settings) {
			s.FallbackChains = map[string][]string{
				"default": {"anthropic/claude-sonnet-4", "openai/gpt-4o"},
				"smol":    {"openrouter/meta/llama-3"},
				"slow":    {},
			}
		}, ""},

		{"the zero Settings", func(s *Settings) { *s = Settings{} }, "retry"},
		{"retry off is not the zero Settings", func(s *Settings) { s.Enabled = false }, ""},
		{"negative maxRetries", func(s *Settings) { s.MaxRetries = -1 }, "retry.maxRetries"},
		{"negative baseDelay", func(s *Settings) { s.BaseDelay = -time.Millisecond }, "retry.baseDelayMs"},
		{"unknown revert policy", func(s *Settings) { s.FallbackRevertPolicy = "sometimes" }, "retry.fallbackRevertPolicy"},
		{"empty revert policy", func(s *Settings) { s.FallbackRevertPolicy = "" }, "retry.fallbackRevertPolicy"},
		{"revert policy is case-sensitive", func(s *Settings) { s.FallbackRevertPolicy = "Never" }, "retry.fallbackRevertPolicy"},
		{"chain entry with no provider", func(s *Settings) {
			s.FallbackChains = map[string][]string{"default": {"gpt-4o"}}
		}, "retry.fallbackChains.default[0]"},
		{"chain entry with empty provider", func(s *Settings) {
			s.FallbackChains = map[string][]string{"smol": {"openai/gpt-4o-mini", "/model"}}
		}, "retry.fallbackChains.smol[1]"},
		{"chain entry with empty model", func(s *Settings) {
			s.FallbackChains = map[string][]string{"slow": {"anthropic/claude-opus-4", "openai/gpt-4o", "openai/"}}
		}, "retry.fallbackChains.slow[2]"},
		{"blank chain entry", func(s *Settings) {
			s.FallbackChains = map[string][]string{"default": {" / "}}
		}, "retry.fallbackChains.default[0]"},
		{"empty role", func(s *Settings) {
			s.FallbackChains = map[string][]string{"": {"openai/gpt-4o"}}
		}, "retry.fallbackChains"},
		{"blank role", func(s *Settings) {
			s.FallbackChains = map[string][]string{"  ": {"openai/gpt-4o"}}
		}, "retry.fallbackChains"},

		// The first bad field is reported, in a stable order.
		{"maxRetries before baseDelay", func(s *Settings) { s.MaxRetries = -1; s.BaseDelay = -1 }, "retry.maxRetries"},
		{"baseDelay before revert policy", func(s *Settings) { s.BaseDelay = -1; s.FallbackRevertPolicy = "x" }, "retry.baseDelayMs"},
		{"roles in sorted order", func(s *Settings) {
			s.FallbackChains = map[string][]string{"smol": {"x"}, "default": {"ok/model", "y"}, "slow": {"z"}}
		}, "retry.fallbackChains.default[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			tt.mutate(&s)
			checkSettingsError(t, s.Validate(), tt.field)
		})
	}
}

func TestSettingsFromProto(t *testing.T) {
	t.Run("nil gives defaults", func(t *testing.T) {
		got, err := SettingsFromProto(nil)
		if err != nil || !reflect.DeepEqual(got, DefaultSettings()) {
			t.Errorf("SettingsFromProto(nil) = %+v, %v; want defaults, nil", got, err)
		}
	})
	t.Run("empty message gives defaults", func(t *testing.T) {
		got, err := SettingsFromProto(&messages.RetrySettings{})
		if err != nil || !reflect.DeepEqual(got, DefaultSettings()) {
			t.Errorf("SettingsFromProto({}) = %+v, %v; want defaults, nil", got, err)
		}
	})

	// Only the fields set override the defaults.
	overrides := []struct {
		name  string
		proto *messages.RetrySettings
		want  func(*Settings)
	}{
		{"enabled=false only", &messages.RetrySettings{Enabled: ptr(false)}, func(s *Settings) { s.Enabled = false }},
		{"maxRetries only", &messages.RetrySettings{MaxRetries: ptr(int32(3))}, func(s *Settings) { s.MaxRetries = 3 }},
		{"maxRetries 0", &messages.RetrySettings{MaxRetries: ptr(int32(0))}, func(s *Settings) { s.MaxRetries = 0 }},
		{"baseDelayMs only", &messages.RetrySettings{BaseDelayMs: ptr(int64(250))}, func(s *Settings) { s.BaseDelay = 250 * time.Millisecond }},
		{"maxDelayMs 0 turns the cap off", &messages.RetrySettings{MaxDelayMs: ptr(int64(0))}, func(s *Settings) { s.MaxDelay = 0 }},
		{"maxDelayMs negative", &messages.RetrySettings{MaxDelayMs: ptr(int64(-1))}, func(s *Settings) { s.MaxDelay = -time.Millisecond }},
		{"modelFallback=false only", &messages.RetrySettings{ModelFallback: ptr(false)}, func(s *Settings) { s.ModelFallback = false }},
		{"revert policy never", &messages.RetrySettings{FallbackRevertPolicy: ptr("never")}, func(s *Settings) { s.FallbackRevertPolicy = RevertNever }},
		{"chains", &messages.RetrySettings{FallbackChains: map[string]*messages.FallbackChain{
			"default": {Models: []string{"openai/gpt-4o", "openrouter/meta/llama-3"}},
		}}, func(s *Settings) {
			s.FallbackChains = map[string][]string{"default": {"openai/gpt-4o", "openrouter/meta/llama-3"}}
		}},
		{"huge max_delay_ms saturates", &messages.RetrySettings{MaxDelayMs: ptr(int64(math.MaxInt64))},
			func(s *Settings) { s.MaxDelay = time.Duration(math.MaxInt64) }},
		{"huge negative max_delay_ms saturates", &messages.RetrySettings{MaxDelayMs: ptr(int64(math.MinInt64))},
			func(s *Settings) { s.MaxDelay = -time.Duration(math.MaxInt64) }},
		{"huge base_delay_ms saturates", &messages.RetrySettings{BaseDelayMs: ptr(int64(math.MaxInt64))},
			func(s *Settings) { s.BaseDelay = time.Duration(math.MaxInt64) }},
		{"max_delay_ms just past the Duration range saturates", &messages.RetrySettings{MaxDelayMs: ptr(int64(math.MaxInt64/int64(time.Millisecond)) + 1)},
			func(s *Settings) { s.MaxDelay = time.Duration(math.MaxInt64) }},
		{"max_delay_ms at the Duration range", &messages.RetrySettings{MaxDelayMs: ptr(int64(math.MaxInt64 / int64(time.Millisecond)))},
			func(s *Settings) {
				s.MaxDelay = time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond
			}},
	}
	for _, tt := range overrides {
		t.Run(tt.name, func(t *testing.T) {
			want := DefaultSettings()
			tt.want(&want)
			got, err := SettingsFromProto(tt.proto)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("SettingsFromProto(%v) = %+v, %v; want %+v, nil", tt.proto, got, err, want)
			}
		})
	}

	// Settings -> Proto -> SettingsFromProto gives the same Settings.
	roundTrips := []struct {
		name string
		s    Settings
	}{
		{"defaults", DefaultSettings()},
		{"everything changed", Settings{
			Enabled:       false,
			MaxRetries:    3,
			BaseDelay:     250 * time.Millisecond,
			MaxDelay:      0,
			ModelFallback: false,
			FallbackChains: map[string][]string{
				"default": {"anthropic/claude-sonnet-4", "openai/gpt-4o"},
				"smol":    {"openrouter/meta/llama-3"},
			},
			FallbackRevertPolicy: RevertNever,
		}},
		{"cap off by negative maxDelay", Settings{
			Enabled: true, MaxRetries: 0, BaseDelay: 0, MaxDelay: -time.Second,
			ModelFallback: true, FallbackRevertPolicy: RevertCooldownExpiry,
		}},
		{"long delays", Settings{
			Enabled: true, MaxRetries: 1 << 20, BaseDelay: time.Hour, MaxDelay: 24 * time.Hour,
			ModelFallback: true, FallbackRevertPolicy: RevertCooldownExpiry,
		}},
	}
	for _, tt := range roundTrips {
		t.Run("round trip "+tt.name, func(t *testing.T) {
			p := tt.s.Proto()
			if p.Enabled == nil || p.MaxRetries == nil || p.BaseDelayMs == nil || p.MaxDelayMs == nil ||
				p.ModelFallback == nil || p.FallbackRevertPolicy == nil {
				t.Errorf("Proto() = %v; want every scalar field set", p)
			}
			got, err := SettingsFromProto(p)
			if err != nil || !reflect.DeepEqual(got, tt.s) {
				t.Errorf("SettingsFromProto(%+v.Proto()) = %+v, %v; want the same, nil", tt.s, got, err)
			}
		})
	}
	t.Run("Proto copies chains", func(t *testing.T) {
		s := DefaultSettings()
		s.FallbackChains = map[string][]string{"default": {"openai/gpt-4o"}}
		p := s.Proto()
		s.FallbackChains["default"][0] = "changed/model"
		if got := p.GetFallbackChains()["default"].GetModels()[0]; got != "openai/gpt-4o" {
			t.Errorf("Proto() chain entry = %q after the Settings changed; want a copy", got)
		}
	})

	invalid := []struct {
		name  string
		proto *messages.RetrySettings
		field string
	}{
		{"negative max_retries", &messages.RetrySettings{MaxRetries: ptr(int32(-1))}, "retry.maxRetries"},
		{"negative base_delay_ms", &messages.RetrySettings{BaseDelayMs: ptr(int64(-500))}, "retry.baseDelayMs"},
		{"huge negative base_delay_ms", &messages.RetrySettings{BaseDelayMs: ptr(int64(math.MinInt64))}, "retry.baseDelayMs"},
		{"unknown revert policy", &messages.RetrySettings{FallbackRevertPolicy: ptr("sometimes")}, "retry.fallbackRevertPolicy"},
		{"empty revert policy", &messages.RetrySettings{FallbackRevertPolicy: ptr("")}, "retry.fallbackRevertPolicy"},
		{"bad chain entry", &messages.RetrySettings{FallbackChains: map[string]*messages.FallbackChain{
			"default": {Models: []string{"gpt-4o"}},
		}}, "retry.fallbackChains.default[0]"},
		{"empty role", &messages.RetrySettings{FallbackChains: map[string]*messages.FallbackChain{
			"": {Models: []string{"openai/gpt-4o"}},
		}}, "retry.fallbackChains"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SettingsFromProto(tt.proto)
			var se *SettingsError
			if !errors.As(err, &se) || se.Field != tt.field {
				t.Errorf("SettingsFromProto(%v) error = %v; want a *SettingsError for %s", tt.proto, err, tt.field)
			}
		})
	}
}

func TestSplitModel(t *testing.T) {
	tests := []struct {
		selector        string
		provider, model string
		ok              bool
	}{
		{"openai/gpt-4o", "openai", "gpt-4o", true},
		{"anthropic/claude-sonnet-4", "anthropic", "claude-sonnet-4", true},
		{"openrouter/meta/llama-3", "openrouter", "meta/llama-3", true},
		{"openrouter/meta-llama/llama-3.1-8b:free", "openrouter", "meta-llama/llama-3.1-8b:free", true},
		{"a/b", "a", "b", true},

		{"", "", "", false},
		{"gpt-4o", "", "", false},
		{"/model", "", "", false},
		{"openai/", "", "", false},
		{"/", "", "", false},
		{"//", "", "", false},
		{" /gpt-4o", "", "", false},
		{"openai/ ", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.selector, func(t *testing.T) {
			provider, model, ok := SplitModel(tt.selector)
			if provider != tt.provider || model != tt.model || ok != tt.ok {
				t.Errorf("SplitModel(%q) = %q, %q, %v; want %q, %q, %v", tt.selector, provider, model, ok, tt.provider, tt.model, tt.ok)
			}
		})
	}
}

// checkSettingsError checks that err is nil when field is empty, and
// otherwise a *SettingsError naming field whose text is "field: problem".
func checkSettingsError(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Errorf("Validate() = %v; want nil", err)
		}
		return
	}
	var se *SettingsError
	if !errors.As(err, &se) {
		t.Fatalf("Validate() = %v (%T); want a *SettingsError for %s", err, err, field)
	}
	if se.Field != field {
		t.Errorf("Validate() field = %q; want %q (error %q)", se.Field, field, err)
	}
	if se.Problem == "" || err.Error() != se.Field+": "+se.Problem {
		t.Errorf("Validate() error text = %q; want %q followed by the problem", err, se.Field)
	}
}
