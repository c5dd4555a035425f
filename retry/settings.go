package retry

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/musepi/musepi/messages"
)

// RevertPolicy says when a session leaves a fallback model for its primary.
type RevertPolicy string

// The revert policies.
const (
	// RevertCooldownExpiry returns to the primary model once its cooldown is over
	// (before each scheduled continue and each new prompt), unless the fallback is pinned.
	RevertCooldownExpiry RevertPolicy = "cooldown-expiry"
	// RevertNever keeps the fallback model.
	RevertNever RevertPolicy = "never"
)

// Settings is the `retry` settings group. The zero value is not useful:
// start from DefaultSettings.
type Settings struct {
	// Enabled turns auto-retry on. Default true. Switching it off mid-chain
	// lets the backoff in progress finish; the next error then ends the chain.
	Enabled bool
	// MaxRetries is the number of retries per chain. Default 10; 0 ends the
	// chain on the first retryable error.
	MaxRetries int
	// BaseDelay is the nominal backoff of attempt 1; it doubles per attempt up
	// to MaxBackoff. Default 500 ms.
	BaseDelay time.Duration
	// MaxDelay is the fail-fast cap: a delay above it ends the chain at once
	// unless a credential or model switch happened. Default 5 min; zero or
	// negative turns the cap off.
	MaxDelay time.Duration
	// ModelFallback lets a retry switch to the next model of FallbackChains.
	// Default true.
	ModelFallback bool
	// FallbackChains maps a role ("default", "smol", "slow", ...) to the ordered
	// "provider/model" entries to fall back to. Default none.
	FallbackChains map[string][]string
	// FallbackRevertPolicy says when the primary model is restored. Default
	// RevertCooldownExpiry.
	FallbackRevertPolicy RevertPolicy
	// Budget is the per-provider retry budget (storm protection beyond the
	// reference policy). Default off.
	Budget BudgetSettings
}

// MaxBackoff caps the local (hint-less) backoff of any attempt.
const MaxBackoff = 8 * time.Second

// DefaultSettings returns the defaults of spec section 4.
func DefaultSettings() Settings {
	return Settings{
		Enabled:              true,
		MaxRetries:           10,
		BaseDelay:            500 * time.Millisecond,
		MaxDelay:             5 * time.Minute,
		ModelFallback:        true,
		FallbackRevertPolicy: RevertCooldownExpiry,
		Budget:               DefaultBudgetSettings(),
	}
}

// SettingsError names the setting that failed validation.
type SettingsError struct {
	Field   string // e.g. "retry.maxRetries"
	Problem string
}

func (e *SettingsError) Error() string { return e.Field + ": " + e.Problem }

// Validate reports the first bad field as a *SettingsError, or nil. The
// zero Settings is not usable (it would say: retry off, no policy): it is
// reported as such, so start from DefaultSettings.
func (s Settings) Validate() error {
	switch {
	case s.isZero():
		return &SettingsError{"retry", "settings are empty (the zero retry.Settings); start from retry.DefaultSettings() and change what differs"}
	case s.MaxRetries < 0:
		return &SettingsError{"retry.maxRetries", fmt.Sprintf("must be 0 or more, got %d", s.MaxRetries)}
	case s.BaseDelay < 0:
		return &SettingsError{"retry.baseDelayMs", fmt.Sprintf("must be 0 or more, got %d", s.BaseDelay.Milliseconds())}
	case s.FallbackRevertPolicy != RevertCooldownExpiry && s.FallbackRevertPolicy != RevertNever:
		return &SettingsError{"retry.fallbackRevertPolicy",
			fmt.Sprintf("unknown policy %q (want %q or %q)", s.FallbackRevertPolicy, RevertCooldownExpiry, RevertNever)}
	}
	if err := s.Budget.Validate(); err != nil {
		return err
	}
	roles := make([]string, 0, len(s.FallbackChains))
	for role := range s.FallbackChains {
		roles = append(roles, role)
	}
	sort.Strings(roles)
	for _, role := range roles {
		field := "retry.fallbackChains." + role
		if strings.TrimSpace(role) == "" {
			return &SettingsError{"retry.fallbackChains", "empty role name"}
		}
		for i, entry := range s.FallbackChains[role] {
			if _, _, ok := SplitModel(entry); !ok {
				return &SettingsError{fmt.Sprintf("%s[%d]", field, i),
					fmt.Sprintf("want \"provider/model\", got %q", entry)}
			}
		}
	}
	return nil
}

// SplitModel splits a "provider/model" selector. The model part may itself
// contain slashes ("openrouter/meta/llama-3").
func SplitModel(selector string) (provider, model string, ok bool) {
	provider, model, ok = strings.Cut(selector, "/")
	if !ok || strings.TrimSpace(provider) == "" || strings.TrimSpace(model) == "" {
		return "", "", false
	}
	return provider, model, true
}

// SettingsFromProto applies the fields set in p over the defaults and
// validates the result.
func SettingsFromProto(p *messages.RetrySettings) (Settings, error) {
	s := DefaultSettings()
	if p == nil {
		return s, nil
	}
	if p.Enabled != nil {
		s.Enabled = p.GetEnabled()
	}
	if p.MaxRetries != nil {
		s.MaxRetries = int(p.GetMaxRetries())
	}
	if p.BaseDelayMs != nil {
		s.BaseDelay = msToDuration(p.GetBaseDelayMs())
	}
	if p.MaxDelayMs != nil {
		s.MaxDelay = msToDuration(p.GetMaxDelayMs())
	}
	if p.ModelFallback != nil {
		s.ModelFallback = p.GetModelFallback()
	}
	if len(p.GetFallbackChains()) > 0 {
		s.FallbackChains = make(map[string][]string, len(p.GetFallbackChains()))
		for role, chain := range p.GetFallbackChains() {
			s.FallbackChains[role] = append([]string(nil), chain.GetModels()...)
		}
	}
	if p.FallbackRevertPolicy != nil {
		s.FallbackRevertPolicy = RevertPolicy(p.GetFallbackRevertPolicy())
	}
	if b := p.GetBudget(); b != nil {
		s.Budget.applyProto(b)
	}
	return s, s.Validate()
}

// applyProto sets the fields set in p over b.
func (b *BudgetSettings) applyProto(p *messages.RetryBudget) {
	if p.Enabled != nil {
		b.Enabled = p.GetEnabled()
	}
	if p.MaxTokens != nil {
		b.MaxTokens = p.GetMaxTokens()
	}
	if p.TokenRatio != nil {
		b.TokenRatio = p.GetTokenRatio()
	}
	if p.ProbeIntervalMs != nil {
		b.ProbeInterval = msToDuration(p.GetProbeIntervalMs())
	}
	if p.ReleaseWindowMs != nil {
		b.ReleaseWindow = msToDuration(p.GetReleaseWindowMs())
	}
}

// Proto returns the wire form of s, every field set.
func (s Settings) Proto() *messages.RetrySettings {
	maxRetries := int32(min(s.MaxRetries, 1<<31-1))
	p := &messages.RetrySettings{
		Enabled:              &s.Enabled,
		MaxRetries:           &maxRetries,
		BaseDelayMs:          ptr(s.BaseDelay.Milliseconds()),
		MaxDelayMs:           ptr(s.MaxDelay.Milliseconds()),
		ModelFallback:        &s.ModelFallback,
		FallbackRevertPolicy: ptr(string(s.FallbackRevertPolicy)),
		Budget: &messages.RetryBudget{
			Enabled:         &s.Budget.Enabled,
			MaxTokens:       &s.Budget.MaxTokens,
			TokenRatio:      &s.Budget.TokenRatio,
			ProbeIntervalMs: ptr(s.Budget.ProbeInterval.Milliseconds()),
			ReleaseWindowMs: ptr(s.Budget.ReleaseWindow.Milliseconds()),
		},
	}
	if len(s.FallbackChains) > 0 {
		p.FallbackChains = make(map[string]*messages.FallbackChain, len(s.FallbackChains))
		for role, chain := range s.FallbackChains {
			p.FallbackChains[role] = &messages.FallbackChain{Models: append([]string(nil), chain...)}
		}
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// msToDuration converts milliseconds to a Duration, saturating instead of
// overflowing.
func msToDuration(ms int64) time.Duration {
	const limit = int64(maxDuration / time.Millisecond)
	switch {
	case ms > limit:
		return maxDuration
	case ms < -limit:
		return -maxDuration
	}
	return time.Duration(ms) * time.Millisecond
}

// maxDuration is the largest Duration; delays saturate at it.
const maxDuration = time.Duration(1<<63 - 1)

// isZero reports the zero Settings.
func (s Settings) isZero() bool {
	return !s.Enabled && s.MaxRetries == 0 && s.BaseDelay == 0 && s.MaxDelay == 0 && !s.ModelFallback &&
		len(s.FallbackChains) == 0 && s.FallbackRevertPolicy == "" && s.Budget == (BudgetSettings{})
}
