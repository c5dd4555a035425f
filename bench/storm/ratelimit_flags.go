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
var rateLimitFlags = []string{"prompts", "rpm", "tpm", "high", "pacing", "pacing-limits", "max-tokens", "timeout", "keys", "wire"}

// outageOnly refuses the ratelimit scenario's flags among set (the
// outage scenario's run).
func outageOnly(set map[string]bool) error {
	if f := setAmong(set, rateLimitFlags); f != "" {
		return fmt.Errorf("-%s applies to -scenario ratelimit only", f)
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
	rlMaxKeys           = 26 // key-a to key-z
)

// rateLimitOptions gives the ratelimit scenario's flags not set (the
// names in set) their defaults, and checks them all.
func rateLimitOptions(o *options, set map[string]bool) error {
	if f := setAmong(set, outageFlags); f != "" {
		return fmt.Errorf("-%s applies to -scenario outage only", f)
	}
	if !set["mode"] {
		o.mode = "real"
	}
	defaults := []struct {
		name  string
		apply func()
	}{
		{"sessions", func() { o.sessions = rlDefaultSessions }},
		{"prompts", func() { o.prompts = rlDefaultPrompts }},
		{"rpm", func() { o.rpm = rlDefaultRPM }},
		{"tpm", func() { o.tpm = rlDefaultTPM }},
		{"high", func() { o.highPercent = rlDefaultHigh }},
		{"max-tokens", func() { o.maxTokens = rlDefaultMaxTokens }},
		{"max-retries", func() { o.maxRetries = rlDefaultMaxRetries }},
		{"timeout", func() { o.timeout = rlDefaultTimeout }},
		{"pacing-limits", func() { o.pacingLimits = rlDefaultLimits }},
		{"keys", func() { o.keys = rlDefaultKeys }},
		{"wire", func() { o.wire = rlDefaultWire }},
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
	switch {
	case o.mode != "real" && o.mode != "cluster":
		return fmt.Errorf("-scenario ratelimit runs in -mode real or cluster (the wall clock, fakellm over loopback), got %q", o.mode)
	case o.sessions < 1:
		return fmt.Errorf("-sessions must be 1 or more, got %d", o.sessions)
	case o.prompts < 1:
		return fmt.Errorf("-prompts must be 1 or more, got %d", o.prompts)
	case o.rpm < 0 || o.rpm > fakellm.MaxLimit || o.tpm < 0 || o.tpm > fakellm.MaxLimit:
		return fmt.Errorf("-rpm and -tpm must be 0-%d, got %d and %d", fakellm.MaxLimit, o.rpm, o.tpm)
	case o.rpm == 0 && o.tpm == 0:
		return fmt.Errorf("-rpm or -tpm must be above 0")
	case o.highPercent < 0 || o.highPercent > 100:
		return fmt.Errorf("-high must be 0-100, got %d", o.highPercent)
	case o.pacing != "off" && o.pacing != "on" && o.pacing != "both":
		return fmt.Errorf("-pacing must be off, on or both, got %q", o.pacing)
	case o.pacingLimits != "headers" && o.pacingLimits != "configured":
		return fmt.Errorf("-pacing-limits must be headers or configured, got %q", o.pacingLimits)
	case o.maxTokens < 0:
		return fmt.Errorf("-max-tokens must not be negative, got %d", o.maxTokens)
	case o.keys < 1 || o.keys > rlMaxKeys:
		return fmt.Errorf("-keys must be 1-%d, got %d", rlMaxKeys, o.keys)
	case o.wire != "openai" && o.wire != "anthropic":
		return fmt.Errorf("-wire must be openai or anthropic, got %q", o.wire)
	case o.wire == "anthropic" && o.maxTokens == 0:
		return fmt.Errorf("-wire anthropic needs -max-tokens above 0 (the Messages API requires max_tokens)")
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
