package main

import (
	"fmt"
	"strings"
)

// comparison is how a measured value must relate to its target's bound.
type comparison string

// The comparisons a target makes.
const (
	atMost  comparison = "<="
	atLeast comparison = ">="
	below   comparison = "<"
)

// holds reports whether v meets bound by c; false for a comparison it
// does not know.
func (c comparison) holds(v, bound float64) bool {
	switch c {
	case atMost:
		return v <= bound
	case atLeast:
		return v >= bound
	case below:
		return v < bound
	}
	return false
}

// target is one performance target: a figure of MusePi's, its own or
// over the same figure of the floor or the peer in the same run, and the
// bound it must meet.
type target struct {
	mode   string // the mode it applies to: "virtual", "real", "ratelimit", "ratelimit-cluster" or "overload"
	label  string // what the figure is, e.g. "CPU per attempt"
	key    string // the figure's Figure.Key
	versus string // a system ("floor", "peer", "musepi-pacing-off"): a ratio to its figure; empty: MusePi's own figure
	cmp    comparison
	bound  float64
	// system, when set, is the start of the names of the systems it is
	// checked on (the ratelimit scenario's MusePi with pacing on); empty:
	// every single-node MusePi system.
	system string
}

// targets are the project's performance targets, set in issue 27 (the
// storm's goals for the runtime): each mode's bounds on the figures the
// storm measures. Most are ratios to the floor or the peer measured in
// the same run, so that the speed of the shared host cancels out.
var targets = []target{
	{"virtual", "CPU per attempt", "cpu_us_per_attempt", "floor", atMost, 1.5, ""},
	{"virtual", "retry attempts per wall-second", "attempts_per_second", "floor", atLeast, 0.67, ""},
	{"virtual", "memory per waiting session", "bytes_per_waiting_session", "peer", atMost, 0.9, ""},
	{"virtual", "peak heap + goroutine stacks", "peak_memory_mb", "peer", atMost, 1.0, ""},
	{"virtual", "prompts lost", "prompts_lost", "", atMost, 0, ""},
	{"virtual", "lockstep index", "lockstep_index", "", atMost, 1.5, ""},
	{"real", "CPU per attempt", "cpu_us_per_attempt", "peer", atMost, 0.9, ""},
	{"real", "memory per waiting session", "bytes_per_waiting_session", "peer", atMost, 1.0, ""},
	{"real", "first-wave p99 wake-up lateness", "first_wave_lateness_p99_ms", "peer", atMost, 1.0, ""},
	{"real", "max wake-up lateness", "lateness_max_ms", "peer", atMost, 2.0, ""},
	{"real", "prompts lost", "prompts_lost", "", atMost, 0, ""},
	// Issue 28 (pacing): the ratelimit scenario, for MusePi with pacing on.
	{"ratelimit", "429 responses per request", "http_429_share", "", atMost, 0.01, rlPacedSystem},
	{"ratelimit", "429 responses", "http_429_responses", "peer", atMost, 0.1, rlPacedSystem},
	{"ratelimit", "goodput vs the limit", "goodput_vs_limit", "", atLeast, 0.95, rlPacedSystem},
	{"ratelimit", "p99 prompt latency", "p99_prompt_latency_ms", "peer", atMost, 1.0, rlPacedSystem},
	{"ratelimit", "p99 prompt latency, high priority / low priority", "p99_high_vs_low", "", atMost, 0.5, rlPacedSystem},
	{"ratelimit", "Jain's fairness index", "jain_fairness", "", atLeast, 0.9, rlPacedSystem},
	{"ratelimit", "prompts lost", "prompts_lost", "", atMost, 0, rlPacedSystem},
	// Issue 37: keys kept busy while turns wait, turns kept on their key,
	// and pacing no slower than none, with fewer 429s.
	{"ratelimit", "longest key idle while turns wait for it", "max_key_idle_s", "", atMost, 5, rlPacedSystem},
	{"ratelimit", "turns on their session's previous key", "stayed_on_key_share", "", atLeast, 0.9, rlPacedSystem},
	{"ratelimit", "run time", "run_minutes", rlUnpacedSystem, atMost, 1.5, rlPacedSystem},
	{"ratelimit", "429 responses", "http_429_responses", rlUnpacedSystem, below, 1, rlPacedSystem},
	{"ratelimit-cluster", "429 responses per request", "http_429_share", "", atMost, 0.01, rlClusterSystem},
	{"ratelimit-cluster", "prompts lost", "prompts_lost", "", atMost, 0, rlClusterSystem},
	// Issue 40 (the overload limiter): the overload scenario, for MusePi
	// with the limiter on; the peer and MusePi without it must fail some
	// prompts, or the storm shows nothing.
	{"overload", "overload responses", "http_5xx_responses", ovPeer, atMost, 0.1, ovLimiterOn},
	{"overload", "overload responses per request", "http_5xx_share", "", atMost, 0.05, ovLimiterOn},
	{"overload", "prompts failed", "prompts_failed", "", atMost, 0, ovLimiterOn},
	{"overload", "prompts lost", "prompts_lost", "", atMost, 0, ovLimiterOn},
	{"overload", "prompts failed without the limiter (some)", "prompts_failed", "", atLeast, 1, ovPeer},
	{"overload", "prompts failed without the limiter (some)", "prompts_failed", "", atLeast, 1, ovLimiterOff},
	{"overload", "goodput vs the capacity in the low window", "goodput_vs_capacity", "", atLeast, 0.9, ovLimiterOn},
	{"overload", "p99 prompt latency", "p99_prompt_latency_ms", ovPeer, atMost, 1.0, ovLimiterOn},
	{"overload", "p99 prompt latency, high priority / low priority", "p99_high_vs_low", "", atMost, 0.5, ovLimiterOn},
	{"overload", "limit back to 90 % of the capacity after its return", "limit_recovery_s", "", atMost, 10, ovLimiterOn},
	// The targets of ovLimiterOn hold for its cluster too, whose name it
	// starts (systemsNamed); and the cluster's overload responses stay
	// within 1.5× the single runtime's.
	{"overload", "overload responses", "http_5xx_responses", ovLimiterOn, atMost, 1.5, ovLimiterCluster},
}

// The systems the ratelimit targets are checked on: MusePi with pacing
// on, and its cluster.
const (
	rlPacedSystem   = "musepi-pacing-on"
	rlClusterSystem = "musepi-cluster-"
	// rlUnpacedSystem is MusePi with pacing off, which the paced one is
	// compared with.
	rlUnpacedSystem = "musepi-pacing-off"
)

// TargetResult is one target checked on one MusePi system of a run.
type TargetResult struct {
	Mode       string     `json:"mode"`       // "virtual" or "real"
	Name       string     `json:"name"`       // "CPU per attempt, musepi / floor"
	System     string     `json:"system"`     // the MusePi system checked
	Measured   *float64   `json:"measured"`   // null when a figure is missing
	Comparison comparison `json:"comparison"` // "<=", ">=" or "<"
	Bound      float64    `json:"bound"`
	Met        bool       `json:"met"`
	Missing    string     `json:"missing,omitempty"` // why there is no measured value
}

// checkTargets checks the targets of mode on every single-node MusePi
// system of systems; a target whose figures are missing is not met. Its
// list is empty, not nil, when no target applies to mode (cluster mode).
func checkTargets(mode string, systems []System) []TargetResult {
	byName := map[string]System{}
	for _, s := range systems {
		byName[s.Name] = s
	}
	out := []TargetResult{}
	for _, name := range targetSystems(systems) {
		for _, t := range targets {
			if t.mode == mode && t.system == "" {
				out = append(out, t.check(name, byName))
			}
		}
	}
	for _, t := range targets {
		if t.mode == mode && t.system != "" {
			for _, name := range systemsNamed(t.system, systems) {
				out = append(out, t.check(name, byName))
			}
		}
	}
	return out
}

// systemsNamed are the names of the systems that start with prefix, or
// prefix itself when none does, so that the target is still reported (as
// not met).
func systemsNamed(prefix string, systems []System) []string {
	var names []string
	for _, s := range systems {
		if strings.HasPrefix(s.Name, prefix) {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return []string{prefix}
	}
	return names
}

// targetSystems are the names of the systems the targets are checked on:
// the single-node MusePi systems ("musepi", or "musepi-budget-off" and
// "musepi-budget-on"), or "musepi" when the run has none, so that every
// target is still reported (as not met).
func targetSystems(systems []System) []string {
	var names []string
	for _, s := range systems {
		if strings.HasPrefix(s.Name, "musepi") && !strings.HasPrefix(s.Name, "musepi-cluster-") {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return []string{"musepi"}
	}
	return names
}

// check checks t on the system named system, by the figures of byName.
func (t target) check(system string, byName map[string]System) TargetResult {
	r := TargetResult{Mode: t.mode, Name: t.name(system), System: system, Comparison: t.cmp, Bound: t.bound}
	v, missing := t.measure(system, byName)
	if missing != "" {
		r.Missing = missing
		return r
	}
	r.Measured, r.Met = &v, t.cmp.holds(v, t.bound)
	return r
}

// name is t's name for system: "CPU per attempt, musepi / floor", or
// "prompts lost, musepi" for a figure of its own.
func (t target) name(system string) string {
	if t.versus == "" {
		return t.label + ", " + system
	}
	return fmt.Sprintf("%s, %s / %s", t.label, system, t.versus)
}

// measure is t's measured value for system: its figure, or its figure
// over the one of t.versus. When it cannot be had, missing says why.
func (t target) measure(system string, byName map[string]System) (v float64, missing string) {
	v, ok := byName[system].Figures[t.key]
	if !ok {
		return 0, fmt.Sprintf("%s has no %s", system, t.key)
	}
	if lost := byName[system].Figures["prompts_lost"]; t.key == "run_minutes" && lost > 0 {
		// Its run was stopped at the timeout: the time says only that it
		// took longer. (A stopped t.versus makes the ratio an upper bound,
		// which may still meet an at-most bound.)
		return 0, fmt.Sprintf("%s was stopped with %s prompts unfinished: its run time is not known", system, formatNumber(lost))
	}
	if t.versus == "" {
		return v, ""
	}
	d, ok := byName[t.versus].Figures[t.key]
	switch {
	case !ok:
		return 0, fmt.Sprintf("%s has no %s", t.versus, t.key)
	case d <= 0:
		return 0, fmt.Sprintf("%s's %s is %s: no ratio", t.versus, t.key, formatNumber(d))
	}
	return v / d, ""
}
