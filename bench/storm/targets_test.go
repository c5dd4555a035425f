package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestComparisonHolds(t *testing.T) {
	for _, tc := range []struct {
		cmp      comparison
		v, bound float64
		want     bool
	}{
		{atMost, 1.2, 1.5, true},
		{atMost, 1.5, 1.5, true},
		{atMost, 1.6, 1.5, false},
		{atMost, 0, 0, true},
		{atMost, 1, 0, false},
		{atLeast, 0.8, 0.67, true},
		{atLeast, 0.67, 0.67, true},
		{atLeast, 0.5, 0.67, false},
		{below, 0.99, 1, true},
		{below, 1, 1, false},
		{below, 0, 0, false},
		{"==", 1, 1, false},
	} {
		if got := tc.cmp.holds(tc.v, tc.bound); got != tc.want {
			t.Errorf("%v %s %v = %v, want %v", tc.v, tc.cmp, tc.bound, got, tc.want)
		}
	}
}

// TestTargetTable checks every target names a mode that runs, a figure
// the storm measures, a contender (the floor, the peer, or MusePi with
// pacing off, MusePi with the overload limiter on) and a comparison: a
// typo would report the target as missing, run after run.
func TestTargetTable(t *testing.T) {
	keys := map[string]bool{}
	for _, f := range figures {
		keys[f.Key] = true
	}
	for _, f := range append(slices.Clone(rlFigureRows), ovFigureRows...) {
		keys[f.Key] = true
	}
	modes := append([]string{"ratelimit", "ratelimit-cluster", "overload"}, bothModes...)
	for _, tg := range targets {
		if !slices.Contains(modes, tg.mode) || !keys[tg.key] || tg.label == "" ||
			!slices.Contains([]string{"", "floor", "peer", rlUnpacedSystem, ovLimiterOn}, tg.versus) ||
			!slices.Contains([]comparison{atMost, atLeast, below}, tg.cmp) {
			t.Errorf("target %+v: want a mode of %v, a figure key, a label, versus floor, peer, %s, %s or none, and <=, >= or <", tg, modes, rlUnpacedSystem, ovLimiterOn)
		}
	}
}

// expected is a target result expected by name: its measured value (nil:
// missing) and whether it is met.
type expected struct {
	measured *float64
	met      bool
}

// ptr is a pointer to v, for a measured value.
func ptr(v float64) *float64 { return &v }

func TestCheckTargets(t *testing.T) {
	floor := System{Name: "floor", Figures: map[string]float64{"cpu_us_per_attempt": 20, "attempts_per_second": 100_000}}
	peer := System{Name: "peer", Figures: map[string]float64{
		"cpu_us_per_attempt": 10, "bytes_per_waiting_session": 5000, "peak_memory_mb": 600,
		"first_wave_lateness_p99_ms": 200, "lateness_max_ms": 0, // zero: no ratio
	}}
	musepi := func(name string, figures map[string]float64) System {
		base := map[string]float64{
			"cpu_us_per_attempt": 25, "attempts_per_second": 70_000, "bytes_per_waiting_session": 4500,
			"peak_memory_mb": 660, "prompts_lost": 0, "lockstep_index": 1.2,
			"first_wave_lateness_p99_ms": 20, "lateness_max_ms": 50,
		}
		for k, v := range figures {
			base[k] = v
		}
		return System{Name: name, Figures: base}
	}
	for _, tc := range []struct {
		name    string
		mode    string
		systems []System
		want    map[string]expected // by result name; every result is listed
	}{
		{"virtual: met and not met, both comparisons", "virtual", []System{floor, peer, musepi("musepi", nil)}, map[string]expected{
			"CPU per attempt, musepi / floor":                {ptr(1.25), true},
			"retry attempts per wall-second, musepi / floor": {ptr(0.7), true},
			"memory per waiting session, musepi / peer":      {ptr(0.9), true},
			"peak heap + goroutine stacks, musepi / peer":    {ptr(1.1), false},
			"prompts lost, musepi":                           {ptr(0), true},
			"lockstep index, musepi":                         {ptr(1.2), true},
		}},
		{"virtual: at least not met, lost prompts", "virtual", []System{floor, peer,
			musepi("musepi", map[string]float64{"attempts_per_second": 50_000, "prompts_lost": 3, "cpu_us_per_attempt": 40})}, map[string]expected{
			"CPU per attempt, musepi / floor":                {ptr(2), false},
			"retry attempts per wall-second, musepi / floor": {ptr(0.5), false},
			"memory per waiting session, musepi / peer":      {ptr(0.9), true},
			"peak heap + goroutine stacks, musepi / peer":    {ptr(1.1), false},
			"prompts lost, musepi":                           {ptr(3), false},
			"lockstep index, musepi":                         {ptr(1.2), true},
		}},
		{"real: missing and zero figures are not met", "real", []System{peer, musepi("musepi", nil)}, map[string]expected{
			"CPU per attempt, musepi / peer":                 {ptr(2.5), false},
			"memory per waiting session, musepi / peer":      {ptr(0.9), true},
			"first-wave p99 wake-up lateness, musepi / peer": {ptr(0.1), true},
			"max wake-up lateness, musepi / peer":            {nil, false}, // the peer's is 0
			"prompts lost, musepi":                           {ptr(0), true},
		}},
		{"virtual: no floor, no lockstep", "virtual", []System{peer,
			{Name: "musepi", Figures: map[string]float64{"bytes_per_waiting_session": 4000, "peak_memory_mb": 600, "prompts_lost": 0}}}, map[string]expected{
			"CPU per attempt, musepi / floor":                {nil, false},
			"retry attempts per wall-second, musepi / floor": {nil, false},
			"memory per waiting session, musepi / peer":      {ptr(0.8), true},
			"peak heap + goroutine stacks, musepi / peer":    {ptr(1), true},
			"prompts lost, musepi":                           {ptr(0), true},
			"lockstep index, musepi":                         {nil, false},
		}},
		{"real: no musepi", "real", []System{peer}, map[string]expected{
			"CPU per attempt, musepi / peer":                 {nil, false},
			"memory per waiting session, musepi / peer":      {nil, false},
			"first-wave p99 wake-up lateness, musepi / peer": {nil, false},
			"max wake-up lateness, musepi / peer":            {nil, false},
			"prompts lost, musepi":                           {nil, false},
		}},
		{"real: budgets compared, cluster left out", "real", []System{peer,
			musepi("musepi-budget-off", nil), musepi("musepi-budget-on", map[string]float64{"prompts_lost": 1}),
			musepi("musepi-cluster-3", map[string]float64{"prompts_lost": 5})}, map[string]expected{
			"CPU per attempt, musepi-budget-off / peer":                 {ptr(2.5), false},
			"memory per waiting session, musepi-budget-off / peer":      {ptr(0.9), true},
			"first-wave p99 wake-up lateness, musepi-budget-off / peer": {ptr(0.1), true},
			"max wake-up lateness, musepi-budget-off / peer":            {nil, false},
			"prompts lost, musepi-budget-off":                           {ptr(0), true},
			"CPU per attempt, musepi-budget-on / peer":                  {ptr(2.5), false},
			"memory per waiting session, musepi-budget-on / peer":       {ptr(0.9), true},
			"first-wave p99 wake-up lateness, musepi-budget-on / peer":  {ptr(0.1), true},
			"max wake-up lateness, musepi-budget-on / peer":             {nil, false},
			"prompts lost, musepi-budget-on":                            {ptr(1), false},
		}},
		{"cluster: no targets", "cluster", []System{musepi("musepi", nil), musepi("musepi-cluster-3", nil)}, map[string]expected{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := checkTargets(tc.mode, tc.systems)
			if results == nil {
				t.Fatal("checkTargets = nil, want a list (empty when no target applies)")
			}
			got := map[string]expected{}
			for _, r := range results {
				checkResult(t, tc.mode, r)
				got[r.Name] = expected{r.Measured, r.Met}
			}
			if len(got) != len(results) || !sameResults(got, tc.want) {
				t.Errorf("checkTargets(%s) =\n %v\nwant\n %v", tc.mode, show(got), show(tc.want))
			}
		})
	}
}

// checkResult checks what every result of mode says: its mode, system,
// comparison and bound from the table, and a reason exactly when it has
// no measured value.
func checkResult(t *testing.T, mode string, r TargetResult) {
	t.Helper()
	if r.Mode != mode || !strings.Contains(r.Name, r.System) || (r.Comparison != atMost && r.Comparison != atLeast) {
		t.Errorf("%+v: want mode %s, its system in its name, <= or >=", r, mode)
	}
	if (r.Measured == nil) != (r.Missing != "") {
		t.Errorf("%s: measured %v, missing %q; want a reason exactly when nothing was measured", r.Name, r.Measured, r.Missing)
	}
	if r.Measured == nil && r.Met {
		t.Errorf("%s: met with nothing measured", r.Name)
	}
}

// sameResults compares results by name, their measured values to within
// rounding.
func sameResults(got, want map[string]expected) bool {
	if len(got) != len(want) {
		return false
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok || g.met != w.met || (g.measured == nil) != (w.measured == nil) {
			return false
		}
		if g.measured != nil && !nearly(*g.measured, *w.measured) {
			return false
		}
	}
	return true
}

// nearly reports whether a and b are equal to within rounding.
func nearly(a, b float64) bool {
	d := a - b
	return d < 1e-9 && d > -1e-9
}

// show renders results for an error message.
func show(results map[string]expected) string {
	var lines []string
	for name, r := range results {
		v := "missing"
		if r.measured != nil {
			v = formatNumber(*r.measured)
		}
		lines = append(lines, name+": "+v+", met "+map[bool]string{true: "yes", false: "no"}[r.met])
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n ")
}

func TestCheckTargetsMissingReasons(t *testing.T) {
	peer := System{Name: "peer", Figures: map[string]float64{"cpu_us_per_attempt": 0, "first_wave_lateness_p99_ms": 10}}
	musepi := System{Name: "musepi", Figures: map[string]float64{"cpu_us_per_attempt": 5, "lateness_max_ms": 3}}
	for _, tc := range []struct {
		systems []System
		name    string
		missing string
	}{
		{[]System{peer, musepi}, "CPU per attempt, musepi / peer", "peer's cpu_us_per_attempt is 0: no ratio"},
		{[]System{peer, musepi}, "max wake-up lateness, musepi / peer", "peer has no lateness_max_ms"},
		{[]System{peer, musepi}, "first-wave p99 wake-up lateness, musepi / peer", "musepi has no first_wave_lateness_p99_ms"},
		{[]System{peer, musepi}, "prompts lost, musepi", "musepi has no prompts_lost"},
		{[]System{musepi}, "CPU per attempt, musepi / peer", "peer has no cpu_us_per_attempt"},
		{[]System{peer}, "memory per waiting session, musepi / peer", "musepi has no bytes_per_waiting_session"},
	} {
		found := false
		for _, r := range checkTargets("real", tc.systems) {
			if r.Name != tc.name {
				continue
			}
			found = true
			if r.Missing != tc.missing || r.Met || r.Measured != nil {
				t.Errorf("%s: missing %q, met %v, measured %v; want %q, not met, nothing measured", r.Name, r.Missing, r.Met, r.Measured, tc.missing)
			}
		}
		if !found {
			t.Errorf("no result named %q", tc.name)
		}
	}
}

// TestRunTimeOfAStoppedRun: a contender stopped at the timeout has no
// run time to compare; one that finished is compared with a stopped one,
// whose time is a lower bound of what it would have taken.
func TestRunTimeOfAStoppedRun(t *testing.T) {
	const name = "run time, musepi-pacing-on / musepi-pacing-off"
	off := System{Name: rlUnpacedSystem, Figures: map[string]float64{"run_minutes": 20, "prompts_lost": 5082}}
	for _, tc := range []struct {
		on      map[string]float64
		met     bool
		missing string
	}{
		{map[string]float64{"run_minutes": 7.68, "prompts_lost": 0}, true, ""},
		{map[string]float64{"run_minutes": 20, "prompts_lost": 5}, false, "musepi-pacing-on was stopped with 5 prompts unfinished: its run time is not known"},
	} {
		found := false
		for _, r := range checkTargets("ratelimit", []System{off, {Name: rlPacedSystem, Figures: tc.on}}) {
			if r.Name != name {
				continue
			}
			found = true
			if r.Met != tc.met || r.Missing != tc.missing {
				t.Errorf("on %v: met %v, missing %q; want %v, %q", tc.on, r.Met, r.Missing, tc.met, tc.missing)
			}
		}
		if !found {
			t.Errorf("no result named %q", name)
		}
	}
}

func TestTargetSystems(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  []string
	}{
		{[]string{"floor", "peer", "musepi"}, []string{"musepi"}},
		{[]string{"peer", "musepi-budget-off", "musepi-budget-on"}, []string{"musepi-budget-off", "musepi-budget-on"}},
		{[]string{"musepi", "musepi-cluster-3"}, []string{"musepi"}},
		{[]string{"floor", "peer"}, []string{"musepi"}},
		{nil, []string{"musepi"}},
	} {
		var systems []System
		for _, n := range tc.names {
			systems = append(systems, System{Name: n})
		}
		if got := targetSystems(systems); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("targetSystems(%v) = %v, want %v", tc.names, got, tc.want)
		}
	}
}
