package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/musepi/musepi/provider/fakellm"
)

// outageFlags are the flags of the outage scenario only.
var outageFlags = []string{"outage", "outage-start", "mix", "usage-limit", "budget", "provider", "heapprofile"}

// rateLimitFlags are the flags of the ratelimit scenario only.
var rateLimitFlags = []string{"prompts", "rpm", "tpm", "high", "pacing", "pacing-limits", "max-tokens", "timeout", "keys", "wire", "itpm", "otpm", "window"}

// outageOnly refuses the ratelimit scenario's flags among set (the
// outage scenario's run).
func outageOnly(set map[string]bool) error {
	if f := setAmong(set, rateLimitFlags); f != "" {
		return fmt.Errorf("-%s applies to -scenario ratelimit only", f)
	}
	if f := setAmong(set, overloadFlags); f != "" {
		return fmt.Errorf("-%s applies to -scenario overload only", f)
	}
	return nil
}

// setAmong is the first of names (alphabetically) in set, or "".
func setAmong(set map[string]bool, names []string) string {
	var found []string
	for _, n := range names {
		if set[n] {
			found = append(found, n)
		}
	}
	sort.Strings(found)
	if len(found) == 0 {
		return ""
	}
	return found[0]
}

// The ratelimit scenario's defaults (issue 28's "How it must be shown").
const (
	rlDefaultSessions   = 2000
	rlDefaultPrompts    = 3
	rlDefaultRPM        = 600
	rlDefaultTPM        = 200_000
	rlDefaultHigh       = 20
	rlDefaultMaxTokens  = 256
	rlDefaultMaxRetries = 1000
	rlDefaultTimeout    = 20 * time.Minute
	rlDefaultLimits     = "configured"
	rlDefaultKeys       = 2
	rlDefaultWire       = "openai"
	// -wire anthropic: no total token limit, but input and output ones,
	// the input one as the OpenAI run's total, the output one a fifth of
	// it (as Anthropic's tiers have about).
	rlDefaultITPM = 200_000
	rlDefaultOTPM = 40_000
	rlMaxKeys     = 26 // key-a to key-z
)

// rateLimitOptions gives the ratelimit scenario's flags not set (the
// names in set) their defaults, and checks them all.
func rateLimitOptions(o *options, set map[string]bool) error {
	if f := setAmong(set, outageFlags); f != "" {
		return fmt.Errorf("-%s applies to -scenario outage only", f)
	}
	if f := setAmong(set, overloadFlags); f != "" {
		return fmt.Errorf("-%s applies to -scenario overload only", f)
	}
	if !set["mode"] {
		o.mode = "real"
	}
	anthropic := func() bool { return o.wire == "anthropic" }
	defaults := []struct {
		name  string
		apply func()
	}{
		{"wire", func() { o.wire = rlDefaultWire }}, // first: the token limits' defaults follow it
		{"sessions", func() { o.sessions = rlDefaultSessions }},
		{"prompts", func() { o.prompts = rlDefaultPrompts }},
		{"rpm", func() { o.rpm = rlDefaultRPM }},
		{"tpm", func() { o.tpm = map[bool]int64{true: 0, false: rlDefaultTPM}[anthropic()] }},
		{"itpm", func() { o.itpm = map[bool]int64{true: rlDefaultITPM}[anthropic()] }},
		{"otpm", func() { o.otpm = map[bool]int64{true: rlDefaultOTPM}[anthropic()] }},
		{"high", func() { o.highPercent = rlDefaultHigh }},
		{"max-tokens", func() { o.maxTokens = rlDefaultMaxTokens }},
		{"max-retries", func() { o.maxRetries = rlDefaultMaxRetries }},
		{"timeout", func() { o.timeout = rlDefaultTimeout }},
		{"pacing-limits", func() { o.pacingLimits = rlDefaultLimits }},
		{"keys", func() { o.keys = rlDefaultKeys }},
		{"pacing", func() { o.pacing = map[bool]string{true: "on", false: "both"}[o.mode == "cluster"] }},
		{"contenders", func() { o.contenders = map[bool]string{true: "cluster", false: "peer,musepi"}[o.mode == "cluster"] }},
	}
	for _, d := range defaults {
		if !set[d.name] {
			d.apply()
		}
	}
	return validateRateLimit(o)
}

// validateRateLimit checks the flags of a ratelimit run.
func validateRateLimit(o *options) error {
	if err := validateRLKeys(o); err != nil {
		return err
	}
	switch {
	case o.mode != "real" && o.mode != "cluster":
		return fmt.Errorf("-scenario ratelimit runs in -mode real or cluster (the wall clock, fakellm over loopback), got %q", o.mode)
	case o.sessions < 1:
		return fmt.Errorf("-sessions must be 1 or more, got %d", o.sessions)
	case o.prompts < 1:
		return fmt.Errorf("-prompts must be 1 or more, got %d", o.prompts)
	case o.highPercent < 0 || o.highPercent > 100:
		return fmt.Errorf("-high must be 0-100, got %d", o.highPercent)
	case o.pacing != "off" && o.pacing != "on" && o.pacing != "both":
		return fmt.Errorf("-pacing must be off, on or both, got %q", o.pacing)
	case o.pacingLimits != "headers" && o.pacingLimits != "configured":
		return fmt.Errorf("-pacing-limits must be headers or configured, got %q", o.pacingLimits)
	case o.maxTokens < 0:
		return fmt.Errorf("-max-tokens must not be negative, got %d", o.maxTokens)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout must be above 0, got %v", o.timeout)
	case o.ramp < 0:
		return fmt.Errorf("-ramp must not be negative, got %v", o.ramp)
	case o.nodes < 1:
		return fmt.Errorf("-nodes must be 1 or more, got %d", o.nodes)
	}
	for _, c := range strings.Split(o.contenders, ",") {
		if !slices.Contains([]string{"peer", "musepi", "cluster"}, c) {
			return fmt.Errorf("-contenders: unknown contender %q in the ratelimit scenario (peer, musepi, cluster)", c)
		}
	}
	return nil
}

// validateRLKeys checks the keys of a ratelimit run: how many, their
// limits, the window, and the API they speak.
func validateRLKeys(o *options) error {
	some := false
	for _, l := range []struct {
		name string
		v    int64
	}{{"rpm", o.rpm}, {"tpm", o.tpm}, {"itpm", o.itpm}, {"otpm", o.otpm}} {
		if l.v < 0 || l.v > fakellm.MaxLimit {
			return fmt.Errorf("-%s must be 0-%d, got %d", l.name, fakellm.MaxLimit, l.v)
		}
		some = some || l.v > 0
	}
	switch {
	case !some:
		return fmt.Errorf("-rpm, -tpm, -itpm or -otpm must be above 0")
	case o.keys < 1 || o.keys > rlMaxKeys:
		return fmt.Errorf("-keys must be 1-%d, got %d", rlMaxKeys, o.keys)
	case o.window < 0 || o.window > time.Minute || o.window%time.Millisecond != 0:
		return fmt.Errorf("-window must be whole ms from 0 to 1m, got %v", o.window)
	case o.wire != "openai" && o.wire != "anthropic":
		return fmt.Errorf("-wire must be openai or anthropic, got %q", o.wire)
	case o.wire == "openai" && (o.itpm > 0 || o.otpm > 0):
		return fmt.Errorf("-itpm and -otpm apply to -wire anthropic only (OpenAI has no input and output limits)")
	case o.wire == "anthropic" && o.maxTokens == 0:
		return fmt.Errorf("-wire anthropic needs -max-tokens above 0 (the Messages API requires max_tokens)")
	}
	return nil
}
