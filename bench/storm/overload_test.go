package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/overload"
	"github.com/musepi/musepi/provider/fakellm"
)

// The issue's capacity: 200 in flight, 40 from 10 s for 60 s.
var issueCapacity = ovCapacity{High: 200, Low: 40, LowStart: 10 * time.Second, LowFor: time.Minute, LatencyMs: 500}

func TestOverloadCapacity(t *testing.T) {
	c := issueCapacity
	if got := c.lowAllows(); got != 2400 {
		t.Errorf("lowAllows = %v; want 40 calls × 60 s / 1 s = 2400", got)
	}
	sc := &rateLimitScenario{Sessions: 10, Prompts: 2, Keys: rlKeys(1), HighPercent: 20, Capacity: &c}
	fsc := sc.fakellm()
	if err := fsc.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []fakellm.Capacity{{Model: rlModel, InFlight: 200, LatencyMs: 500,
		Changes: []fakellm.CapacityChange{{FromMs: 10_000, InFlight: 40}, {FromMs: 70_000, InFlight: 200}}}}
	if !reflect.DeepEqual(fsc.Capacity, want) || len(fsc.Limits) != 0 {
		t.Errorf("fakellm capacity %+v, limits %+v; want %+v and no limit", fsc.Capacity, fsc.Limits, want)
	}
	if s := sc.String(); !strings.Contains(s, "capacity 200 calls in flight, 40 from 10s for 1m0s, then 200 again") {
		t.Errorf("String() = %q; want the capacity", s)
	}
}

func TestOverloadFigures(t *testing.T) {
	c := issueCapacity
	s := time.Second
	prompts := []rlPrompt{
		{begun: true, ended: true, ok: true, end: 9 * s},  // before the window
		{begun: true, ended: true, ok: true, end: 10 * s}, // in it
		{begun: true, ended: true, ok: true, end: 69 * s}, // in it
		{begun: true, ended: true, ok: false, end: 30 * s},
		{begun: true, ended: true, ok: true, end: 70 * s}, // after it
	}
	stats := fakellm.Stats{Total: 10, ByStatus: map[string]int64{"200": 6, "503": 3, "529": 1}}
	f := map[string]float64{}
	overloadFigures(f, &c, prompts, stats)
	want := map[string]float64{"http_5xx_responses": 4, "http_5xx_share": 0.4, "prompts_completed_low_window": 2,
		"low_window_allows": 2400, "goodput_vs_capacity": 2.0 / 2400}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("figures %v; want %v", f, want)
	}
}

func TestLimitFigures(t *testing.T) {
	c := issueCapacity // returns at 70 s; 90 % of it is 180
	s := time.Second
	for _, tc := range []struct {
		name    string
		samples []limitSample
		want    map[string]float64
	}{
		{"none", nil, map[string]float64{}},
		{"back 4 s after the return", []limitSample{{5 * s, 1000, nil}, {30 * s, 38, nil}, {70 * s, 40, nil}, {72 * s, 179, nil}, {74 * s, 180, nil}},
			map[string]float64{"limit_min": 38, "limit_recovery_s": 4}},
		{"high before the return does not count", []limitSample{{60 * s, 300, nil}, {69 * s, 20, nil}},
			map[string]float64{"limit_min": 20}},
		{"never low", []limitSample{{70 * s, 1000, nil}}, map[string]float64{"limit_min": 1000, "limit_recovery_s": 0}},
	} {
		if got := limitFigures(&c, tc.samples); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestConvergenceFigures: the settled low window of the issue's capacity
// is [20 s, 70 s); its band around the low capacity, 40, is 20 to 60.
func TestConvergenceFigures(t *testing.T) {
	c := issueCapacity
	s := time.Second
	at := func(d time.Duration, nodes ...int) limitSample {
		sum := 0
		for _, n := range nodes {
			sum += n
		}
		return limitSample{at: d, limit: sum, nodes: nodes}
	}
	for _, tc := range []struct {
		name    string
		samples []limitSample
		want    map[string]float64
	}{
		{"no reading in the settled window", []limitSample{at(15*s, 10, 10, 10), at(70*s, 10, 10, 10)}, map[string]float64{}},
		{"three nodes converged, one decrease", []limitSample{at(19*s, 100, 1, 1), at(20*s, 14, 13, 13), at(30*s, 15, 14, 13),
			at(40*s, 12, 14, 14), at(69*s, 13, 14, 13), at(70*s, 100, 100, 100)},
			map[string]float64{"limit_sum_low_mean": 40.5, "limit_sum_low_min": 40, "limit_sum_low_max": 42, "limit_sum_in_band": 1,
				"limit_converged": 1, "limit_decreases_node_1": 1, "limit_decreases_node_2": 0, "limit_decreases_node_3": 1,
				"limit_decreases_max": 1, "limit_node_mean_spread": 13.75 / 13.25}},
		{"one runtime out of the band half the time", []limitSample{at(20*s, 80), at(30*s, 40), at(40*s, 19), at(50*s, 40)},
			map[string]float64{"limit_sum_low_mean": 44.75, "limit_sum_low_min": 19, "limit_sum_low_max": 80, "limit_sum_in_band": 0.5,
				"limit_converged": 0, "limit_decreases_node_1": 2, "limit_decreases_max": 2, "limit_node_mean_spread": 1}},
	} {
		if got := convergenceFigures(&c, tc.samples); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestLimitTimeline(t *testing.T) {
	if got := limitTimeline(nil); got != nil {
		t.Errorf("no samples: %+v; want nil", got)
	}
	samples := []limitSample{{at: 100 * time.Millisecond, limit: 30, nodes: []int{10, 20}},
		{at: 200 * time.Millisecond, limit: 25, nodes: []int{9, 16}}}
	want := &LimitTimeline{PeriodMs: 100, AtMs: []int64{100, 200}, Nodes: [][]int{{10, 9}, {20, 16}}}
	if got := limitTimeline(samples); !reflect.DeepEqual(got, want) {
		t.Errorf("%+v; want %+v", got, want)
	}
}

func TestOverloadFlags(t *testing.T) {
	ov := func(args ...string) []string { return append([]string{"-scenario", "overload"}, args...) }
	for _, tc := range []struct {
		name   string
		args   []string
		errHas string
	}{
		{name: "the defaults", args: ov()},
		{name: "a ratelimit flag", args: ov("-rpm", "10"), errHas: "-rpm does not apply to -scenario overload"},
		{name: "an outage flag", args: ov("-outage", "1s"), errHas: "-outage does not apply"},
		{name: "an overload flag in the ratelimit", args: []string{"-scenario", "ratelimit", "-capacity", "3"}, errHas: "-capacity applies to -scenario overload only"},
		{name: "an overload flag in the outage", args: []string{"-low-start", "3s"}, errHas: "-low-start applies to -scenario overload only"},
		{name: "cluster mode", args: ov("-mode", "cluster"), errHas: "runs in -mode real"},
		{name: "low above high", args: ov("-capacity", "10", "-low-capacity", "20"), errHas: "the low one at most"},
		{name: "no window", args: ov("-window", "0s"), errHas: "-window above 0"},
		{name: "an unknown contender", args: ov("-contenders", "peer,musepi"), errHas: `unknown contender "musepi"`},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.errHas == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: error %v; want one with %q", tc.name, err, tc.errHas)
		case tc.errHas == "":
			got := []any{o.mode, o.sessions, o.prompts, o.highPercent, o.capacity, o.lowCapacity, o.lowStart, o.window, o.contenders, o.keys}
			want := []any{"real", 2000, 3, 20, 200, 40, 10 * time.Second, time.Minute, "peer,musepi-limiter-off,musepi-limiter-on,musepi-limiter-on-cluster", 1}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %v; want %v", tc.name, got, want)
			}
		}
	}
}

// The overload scenario end to end, small: 30 sessions of 2 prompts on a
// model of capacity 10, 2 for 2 s; fakellm in this process, the OpenAI
// adapter over loopback; the cluster's three nodes on a private
// PostgreSQL; each contender stopped after 40 s at most.
func TestRunOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs on the wall clock")
	}
	if !alone(t) {
		return
	}
	defer aloneChecked(t)
	dir := filepath.Join(t.TempDir(), "out")
	args := []string{"-scenario", "overload", "-sessions", "30", "-prompts", "2", "-capacity", "10", "-low-capacity", "2",
		"-low-start", "1s", "-window", "2s", "-timeout", "40s", "-quiet", "-out", dir}
	var stdout strings.Builder
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "storm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c Combined
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("storm.json: %v", err)
	}
	if c.Mode != "overload" || len(c.Runs) != 1 {
		t.Fatalf("mode %q, %d runs; want overload, one run", c.Mode, len(c.Runs))
	}
	r := c.Runs[0]
	if got, want := systemNames(r), []string{ovPeer, ovLimiterOff, ovLimiterOn, ovLimiterCluster}; !reflect.DeepEqual(got, want) {
		t.Errorf("systems %v, want %v", got, want)
	}
	for _, s := range r.Systems {
		f := s.Figures
		if f["prompts_completed"]+f["prompts_failed"]+f["prompts_lost"] != 60 || f["requests"] < f["prompts_completed"] {
			t.Errorf("%s: %v completed, %v failed, %v lost of 60, %v requests", s.Name, f["prompts_completed"], f["prompts_failed"], f["prompts_lost"], f["requests"])
		}
		for _, k := range []string{"http_5xx_responses", "goodput_vs_capacity", "p50_prompt_latency_ms", "p99_prompt_latency_ms",
			"p99_prompt_latency_ms_high", "p99_prompt_latency_ms_low"} {
			if _, ok := f[k]; !ok {
				t.Errorf("%s has no %s", s.Name, k)
			}
		}
		if f["http_5xx_responses"] == 0 {
			t.Errorf("%s met no overload: the scenario shows nothing", s.Name)
		}
	}
	on := r.Systems[2].Figures
	if on["capacity_waits"] == 0 || on["limit_min"] < 1 || on["limit_min"] > 10 {
		t.Errorf("the limiter: %v capacity waits, lowest limit %v; want some waits and a limit down to the capacity or below",
			on["capacity_waits"], on["limit_min"])
	}
	for i, nodes := range map[int]int{2: 1, 3: 3} {
		checkLimitTimeline(t, r.Systems[i], nodes)
	}
	// The single runtime's 10, and the cluster's: musepi-limiter-on's 8
	// and its overload responses against the single runtime's.
	if want := checkTargets("overload", r.Systems); len(c.Targets) != 19 || !reflect.DeepEqual(c.Targets, want) {
		t.Errorf("targets %+v, want the 19 of checkTargets = %+v", c.Targets, want)
	}
	if !strings.Contains(stdout.String(), "| Figure | peer | musepi-limiter-off | musepi-limiter-on | musepi-limiter-on-cluster |") {
		t.Errorf("storm.md has no table of the four contenders:\n%s", stdout.String())
	}
}

// checkLimitTimeline checks that s, a contender with the limiter on, has
// the limit of each of its nodes over the run, each lowered by the
// overload at some point (from the limiter's start, overload.
// DefaultInitial), and its limit figures read their sum.
func checkLimitTimeline(t *testing.T, s System, nodes int) {
	t.Helper()
	tl := s.Limits
	if tl == nil || tl.PeriodMs != 100 || len(tl.AtMs) == 0 || len(tl.Nodes) != nodes {
		t.Fatalf("%s: limit timeline %+v; want %d nodes read every 100 ms", s.Name, tl, nodes)
	}
	lowest := 0
	for n, limits := range tl.Nodes {
		if len(limits) != len(tl.AtMs) || slices.Min(limits) < 1 || slices.Min(limits) >= overload.DefaultInitial {
			t.Errorf("%s: node %d's limits %v; want one a reading, each 1 or more, lowered from %d", s.Name, n+1, limits, overload.DefaultInitial)
		}
		lowest += slices.Min(limits)
	}
	if f := s.Figures["limit_min"]; f < float64(lowest) {
		t.Errorf("%s: limit_min %v; want the lowest sum of the nodes' limits, at least %d", s.Name, f, lowest)
	}
}
