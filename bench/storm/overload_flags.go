package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// overloadFlags are the flags of the overload scenario only.
var overloadFlags = []string{"capacity", "low-capacity", "low-start"}

// notOverloadFlags are the ratelimit scenario's flags the overload
// scenario has no use for: its one key has no rate limit, and MusePi's
// pacing is off.
var notOverloadFlags = []string{"rpm", "tpm", "itpm", "otpm", "keys", "pacing", "pacing-limits", "max-tokens"}

// The overload scenario's defaults (issue 40's "How it must be shown").
const (
	ovDefaultSessions    = 2000
	ovDefaultPrompts     = 3
	ovDefaultHigh        = 20
	ovDefaultCapacity    = 200
	ovDefaultLowCapacity = 40
	ovDefaultLowStart    = 10 * time.Second
	ovDefaultWindow      = 60 * time.Second
	ovDefaultTimeout     = 150 * time.Second // a contender's bound; the four take about 6 minutes
	ovDefaultContenders  = ovPeer + "," + ovLimiterOff + "," + ovLimiterOn + "," + ovLimiterCluster
	// ovLatencyMs is a call's time to answer alone; full, twice that: the
	// default capacity answers 200 calls a second, its low one 40.
	ovLatencyMs = 500
)

// scenarioRun is how the scenario named name is measured and written;
// nil for the outage scenario (measure and measureBoth).
func scenarioRun(name string) (func(context.Context, *options, string, io.Writer) (*Combined, error), func(*Combined) []outputFile) {
	switch name {
	case "ratelimit":
		return measureRateLimit, rlFiles
	case "overload":
		return measureOverload, ovFiles
	}
	return nil, nil
}

// overloadOptions gives the overload scenario's flags not set (the names
// in set) their defaults, and checks them all.
func overloadOptions(o *options, set map[string]bool) error {
	if f := setAmong(set, append(slices.Clone(outageFlags), notOverloadFlags...)); f != "" {
		return fmt.Errorf("-%s does not apply to -scenario overload", f)
	}
	if !set["mode"] {
		o.mode = "real"
	}
	o.keys, o.maxTokens, o.pacing = 1, rlDefaultMaxTokens, "off"
	defaults := []struct {
		name  string
		apply func()
	}{
		{"wire", func() { o.wire = rlDefaultWire }},
		{"sessions", func() { o.sessions = ovDefaultSessions }},
		{"prompts", func() { o.prompts = ovDefaultPrompts }},
		{"high", func() { o.highPercent = ovDefaultHigh }},
		{"capacity", func() { o.capacity = ovDefaultCapacity }},
		{"low-capacity", func() { o.lowCapacity = ovDefaultLowCapacity }},
		{"low-start", func() { o.lowStart = ovDefaultLowStart }},
		{"window", func() { o.window = ovDefaultWindow }},
		{"timeout", func() { o.timeout = ovDefaultTimeout }},
		{"contenders", func() { o.contenders = ovDefaultContenders }},
	}
	for _, d := range defaults {
		if !set[d.name] {
			d.apply()
		}
	}
	return validateOverload(o)
}

// validateOverload checks the flags of an overload run.
func validateOverload(o *options) error {
	switch {
	case o.mode != "real":
		return fmt.Errorf("-scenario overload runs in -mode real (the wall clock, fakellm over loopback; its cluster is the contender %s), got %q", ovLimiterCluster, o.mode)
	case o.sessions < 1:
		return fmt.Errorf("-sessions must be 1 or more, got %d", o.sessions)
	case o.prompts < 1:
		return fmt.Errorf("-prompts must be 1 or more, got %d", o.prompts)
	case o.highPercent < 0 || o.highPercent > 100:
		return fmt.Errorf("-high must be 0-100, got %d", o.highPercent)
	case o.capacity < 1 || o.lowCapacity < 1 || o.lowCapacity > o.capacity:
		return fmt.Errorf("-capacity and -low-capacity must be 1 or more, the low one at most the other, got %d and %d", o.capacity, o.lowCapacity)
	case o.lowStart < 0 || o.window <= 0 || o.lowStart%time.Millisecond != 0 || o.window%time.Millisecond != 0:
		return fmt.Errorf("-low-start and -window must be whole ms, -window above 0, got %v and %v", o.lowStart, o.window)
	case o.wire != "openai" && o.wire != "anthropic":
		return fmt.Errorf("-wire must be openai or anthropic, got %q", o.wire)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout must be above 0, got %v", o.timeout)
	case o.ramp < 0:
		return fmt.Errorf("-ramp must not be negative, got %v", o.ramp)
	}
	for _, c := range strings.Split(o.contenders, ",") {
		if !slices.Contains([]string{ovPeer, ovLimiterOff, ovLimiterOn, ovLimiterCluster}, c) {
			return fmt.Errorf("-contenders: unknown contender %q in the overload scenario (%s)", c, ovDefaultContenders)
		}
	}
	return nil
}
