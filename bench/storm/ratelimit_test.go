package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/provider/fakellm"
)

// near reports whether a and b agree to 1e-9, relatively.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestLimitPerMinute(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		keys                  int
		rpm, tpm, itpm, otpm  int64
		tokens, input, output float64
		want                  float64
	}{
		{"requests bind", 2, 600, 200_000, 0, 0, 300, 0, 0, 1200},       // 200,000 / 300 = 666 > 600
		{"tokens bind", 2, 600, 200_000, 0, 0, 400, 0, 0, 1000},         // 200,000 / 400 = 500 < 600
		{"balanced", 1, 600, 200_000, 0, 0, 200_000.0 / 600, 0, 0, 600}, // both the same
		{"no token limit", 2, 600, 0, 0, 0, 400, 0, 0, 1200},
		{"no request limit", 2, 0, 200_000, 0, 0, 400, 0, 0, 1000},
		{"no cost known", 2, 600, 200_000, 0, 0, 0, 0, 0, 1200},
		{"three keys", 3, 100, 10_000, 0, 0, 200, 0, 0, 150},
		{"input binds", 2, 600, 0, 150_000, 40_000, 352, 322, 30, 2 * 150_000.0 / 322},
		{"output binds", 1, 600, 0, 200_000, 6_000, 352, 322, 30, 200},
		{"the total binds", 1, 600, 100_000, 200_000, 40_000, 400, 370, 30, 250},
		{"nothing limits", 2, 0, 0, 0, 0, 400, 370, 30, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &rateLimitScenario{Keys: rlKeys(tc.keys), RPM: tc.rpm, TPM: tc.tpm, ITPM: tc.itpm, OTPM: tc.otpm}
			if got := sc.limitPerMinute(rlCost{tc.tokens, tc.input, tc.output}); !near(got, tc.want) {
				t.Errorf("limitPerMinute = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCharged(t *testing.T) {
	for _, tc := range []struct {
		name          string
		wire          string
		maxTokens     int64
		input, output int64
		want          int64
	}{
		{"OpenAI keeps max_tokens", "openai", 256, 300, 30, 556},
		{"OpenAI takes output beyond max_tokens", "openai", 20, 300, 30, 330},
		{"OpenAI without max_tokens", "openai", 0, 300, 30, 330},
		{"Anthropic gives back the unused output", "anthropic", 256, 300, 30, 330},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &rateLimitScenario{Wire: tc.wire, MaxTokens: tc.maxTokens}
			if got := sc.charged(tc.input, tc.output); got != tc.want {
				t.Errorf("charged(%d, %d) = %d, want %d", tc.input, tc.output, got, tc.want)
			}
		})
	}
}

func TestGoodputVsLimit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		completed int
		minutes   float64
		perMinute float64
		window    time.Duration
		want      float64
	}{
		// 6,000 prompts at 1,200 a minute: the full buckets take 1,200 at
		// once, the rest 4 minutes.
		{"at the limit", 6000, 4, 1200, 0, 1},
		{"half as fast", 6000, 9, 1200, 0, 0.5},
		{"all within the burst", 600, 0.5, 1200, 0, 600.0 / 1800},
		// Over 10 s windows the buckets hold a sixth of the minute.
		{"10 s windows", 5000, 4, 1200, 10 * time.Second, 5000.0 / ((4 + 1.0/6) * 1200)},
		{"a window of the minute", 6000, 4, 1200, time.Minute, 1},
		{"no time", 10, 0, 1200, 0, 0},
		{"no limit", 10, 1, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &rateLimitScenario{Window: tc.window}
			if got := goodputVsLimit(tc.completed, tc.minutes, tc.perMinute, sc.burstMinutes()); !near(got, tc.want) {
				t.Errorf("goodputVsLimit(%d, %v, %v, %v) = %v, want %v", tc.completed, tc.minutes, tc.perMinute, sc.burstMinutes(), got, tc.want)
			}
		})
	}
}

func TestJainIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"equal", []float64{3, 3, 3, 3}, 1},
		{"one takes all", []float64{0, 0, 0, 8}, 0.25},
		{"two levels", []float64{1, 3}, 16.0 / 20},
		{"one value", []float64{42}, 1},
		{"none", nil, 1},
		{"all zero", []float64{0, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := jainIndex(tc.xs); !near(got, tc.want) {
				t.Errorf("jainIndex(%v) = %v, want %v", tc.xs, got, tc.want)
			}
		})
	}
}

// testRLScenario is a ratelimit scenario of sessions × prompts, every
// other session high.
func testRLScenario(sessions, prompts int) *rateLimitScenario {
	return &rateLimitScenario{Sessions: sessions, Prompts: prompts, Keys: []string{limitedKey, freeKey},
		RPM: 600, TPM: 200_000, HighPercent: 50, MaxTokens: 256}
}

// promptsOf are the records of sc's prompts, each started at 0 and
// taking latency(i, j) ms, answered with 70 tokens in and 30 out; lost(i,
// j) ones never ended, failed(i, j) ones ended without an answer.
func promptsOf(sc *rateLimitScenario, latency func(i, j int) int, failed, lost func(i, j int) bool) []rlPrompt {
	out := make([]rlPrompt, sc.totalPrompts())
	for i := range sc.Sessions {
		for j := range sc.Prompts {
			p := &out[i*sc.Prompts+j]
			p.begun = true
			if lost(i, j) {
				continue
			}
			p.ended, p.ok = true, !failed(i, j)
			p.end, p.input, p.output = time.Duration(latency(i, j))*time.Millisecond, 70, 30
		}
	}
	return out
}

func TestPromptFigures(t *testing.T) {
	never := func(int, int) bool { return false }
	sc := testRLScenario(4, 2) // sessions 1 and 3 high
	for _, tc := range []struct {
		name         string
		latency      func(i, j int) int
		failed, lost func(i, j int) bool
		want         map[string]float64
	}{
		{"high fast, low slow and unfair", func(i, j int) int {
			if sc.high(i) {
				return 10 * (j + 1) // sessions 1, 3: 10, 20 ms (means 15, 15)
			}
			return 100 * (i + 1) // session 0: 100, 100; session 2: 300, 300
		}, never, never, map[string]float64{
			"prompts_started": 8, "prompts_completed": 8, "prompts_failed": 0, "prompts_lost": 0,
			"p50_prompt_latency_ms": 20, "p99_prompt_latency_ms": 300,
			"p99_prompt_latency_ms_high": 20, "p99_prompt_latency_ms_low": 300, "p99_high_vs_low": 20.0 / 300,
			"jain_fairness_high": 1, "jain_fairness_low": 0.8, "jain_fairness": 0.8, // (100+300)² / (2 (100²+300²))
		}},
		{"failed and lost prompts left out", func(i, j int) int { return 50 }, func(i, j int) bool { return i == 0 && j == 1 },
			func(i, j int) bool { return i == 3 }, map[string]float64{
				"prompts_started": 8, "prompts_completed": 5, "prompts_failed": 1, "prompts_lost": 2,
				"p50_prompt_latency_ms": 50, "p99_prompt_latency_ms": 50,
				"p99_prompt_latency_ms_high": 50, "p99_prompt_latency_ms_low": 50, "p99_high_vs_low": 1,
				"jain_fairness_high": 1, "jain_fairness_low": 1, "jain_fairness": 1,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := map[string]float64{}
			promptFigures(f, sc, promptsOf(sc, tc.latency, tc.failed, tc.lost), 2)
			for k, want := range tc.want {
				if got, ok := f[k]; !ok || !near(got, want) {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
				}
			}
			completed := tc.want["prompts_completed"]
			// 70 + 256 (max_tokens, kept) tokens a prompt: the requests
			// bind, 2 keys × 600 a minute.
			for k, want := range map[string]float64{"tokens_per_prompt": 326, "input_tokens_per_prompt": 70,
				"output_tokens_per_prompt": 30, "limit_prompts_per_minute": 1200,
				"prompts_per_minute": completed / 2, "run_minutes": 2, "goodput_vs_limit": completed / 3600} {
				if got := f[k]; !near(got, want) {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
		})
	}
}

func TestRLFiguresRunMinutes(t *testing.T) {
	sc := testRLScenario(2, 1)
	never := func(int, int) bool { return false }
	stats := fakellm.Stats{Total: 3, ByStatus: map[string]int64{"200": 2, "429": 1}, ByLimit: map[string]int64{fakellm.LimitRequests: 1}}
	for _, tc := range []struct {
		name string
		lost func(i, j int) bool
		want float64 // run_minutes
	}{
		{"every prompt answered: to the last answer", never, 0.5},
		{"a prompt never ended: to the stop", func(i, _ int) bool { return i == 1 }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompts := promptsOf(sc, func(i, _ int) int { return 15_000 * (i + 1) }, never, tc.lost)
			f := rlFigures(sc, prompts, stats, newRLRecorder(sc), 2*time.Minute)
			if !near(f["run_minutes"], tc.want) || f["http_429_share"] != 1.0/3 || f["http_429_requests_limit"] != 1 {
				t.Errorf("run_minutes %v, 429 share %v, of the requests limit %v; want %v, 1/3, 1",
					f["run_minutes"], f["http_429_share"], f["http_429_requests_limit"], tc.want)
			}
		})
	}
}

func TestPromptFiguresOnePriority(t *testing.T) {
	sc := testRLScenario(3, 1)
	sc.HighPercent = 0
	f := map[string]float64{}
	promptFigures(f, sc, promptsOf(sc, func(i, _ int) int { return 10 * (i + 1) },
		func(int, int) bool { return false }, func(int, int) bool { return false }), 1)
	for _, k := range []string{"p99_prompt_latency_ms_high", "jain_fairness_high", "p99_high_vs_low"} {
		if v, ok := f[k]; ok {
			t.Errorf("%s = %v with no high-priority session", k, v)
		}
	}
	if want := 36.0 / 42; !near(f["jain_fairness"], want) || !near(f["jain_fairness_low"], want) {
		t.Errorf("jain_fairness %v, low %v; want %v (10, 20, 30 ms)", f["jain_fairness"], f["jain_fairness_low"], want)
	}
}

func TestRateLimitScenario(t *testing.T) {
	sc := &rateLimitScenario{Sessions: 2000, Prompts: 3, Keys: []string{limitedKey, freeKey}, RPM: 600, TPM: 200_000,
		HighPercent: 20, MaxTokens: 256}
	highs, classes := 0, map[bool][3]int{}
	for i := range sc.Sessions {
		if sc.high(i) {
			highs++
			if i%5 != 4 {
				t.Fatalf("session %d high: want every fifth (4, 9, 14, ...)", i)
			}
		}
		for j := range sc.Prompts {
			c := rlSizeClass(sc.rank(i), j)
			counts := classes[sc.high(i)]
			counts[c]++
			classes[sc.high(i)] = counts
			if text := sc.promptText(i, j); len(text) != rlSizes[c]*4 || !strings.HasPrefix(text, fmt.Sprintf("Session %d, prompt %d: ", i, j+1)) {
				t.Fatalf("prompt %d of session %d: %d bytes %.40q, want %d bytes naming them", j, i, len(text), text, rlSizes[c]*4)
			}
		}
	}
	if highs != 400 {
		t.Errorf("%d high sessions, want 400", highs)
	}
	// 6:3:1 within each priority.
	if got, want := classes[true], [3]int{720, 360, 120}; got != want {
		t.Errorf("high priority's prompts by size class %v, want %v", got, want)
	}
	if got, want := classes[false], [3]int{2880, 1440, 480}; got != want {
		t.Errorf("low priority's prompts by size class %v, want %v", got, want)
	}
	if len(rlAnswer) != 120 {
		t.Errorf("answer is %d bytes, want 120 (30 tokens)", len(rlAnswer))
	}
	if sc.keyOf(0) != limitedKey || sc.keyOf(1) != freeKey || sc.keyOf(2) != limitedKey {
		t.Errorf("keys %s %s %s, want round robin", sc.keyOf(0), sc.keyOf(1), sc.keyOf(2))
	}
	fsc := sc.fakellm()
	if err := fsc.Validate(); err != nil {
		t.Fatal(err)
	}
	wantLimits := []fakellm.Limit{{Key: limitedKey, RPM: 600, TPM: 200_000}, {Key: freeKey, RPM: 600, TPM: 200_000}}
	if !reflect.DeepEqual(fsc.Limits, wantLimits) {
		t.Errorf("limits %+v, want %+v", fsc.Limits, wantLimits)
	}
	if s := sc.String(); !strings.Contains(s, "2,000 sessions × 3 prompts") || !strings.Contains(s, "2 keys × 600 requests/min and 200,000 tokens/min") {
		t.Errorf("String() = %q", s)
	}
}

func TestRateLimitScenarioLimits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sc       rateLimitScenario
		limit    fakellm.Limit // key-a's
		text     string        // in String()
		costHas  string
		burstMin float64
	}{
		{"openai", rateLimitScenario{RPM: 600, TPM: 200_000, MaxTokens: 256, Wire: "openai"},
			fakellm.Limit{Key: limitedKey, RPM: 600, TPM: 200_000},
			"2 keys × 600 requests/min and 200,000 tokens/min", "still takes its 1 request", 1},
		{"openai over 10 s windows, no max_tokens", rateLimitScenario{RPM: 600, TPM: 6000, Window: 10 * time.Second, Wire: "openai"},
			fakellm.Limit{Key: limitedKey, RPM: 600, TPM: 6000, WindowMs: 10_000},
			"answers 30 tokens; no max_tokens), 2 keys × 600 requests/min and 6,000 tokens/min (enforced over 10s windows),",
			"enforced over 10s windows", 1.0 / 6},
		{"anthropic", rateLimitScenario{RPM: 600, ITPM: 200_000, OTPM: 40_000, MaxTokens: 256, Wire: "anthropic"},
			fakellm.Limit{Key: limitedKey, RPM: 600, ITPM: 200_000, OTPM: 40_000},
			"2 keys × 600 requests/min, 200,000 input tokens/min and 40,000 output tokens/min", "given back at its end", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := tc.sc
			sc.Sessions, sc.Prompts, sc.Keys = 10, 2, rlKeys(2)
			fsc := sc.fakellm()
			if err := fsc.Validate(); err != nil {
				t.Fatal(err)
			}
			if len(fsc.Limits) != 2 || fsc.Limits[0] != tc.limit || fsc.Limits[1].Key != freeKey {
				t.Errorf("limits %+v, want %+v and the same for %s", fsc.Limits, tc.limit, freeKey)
			}
			if s := sc.String(); !strings.Contains(s, tc.text) {
				t.Errorf("String() = %q, want it to contain %q", s, tc.text)
			}
			if s := sc.costText(); !strings.Contains(s, tc.costHas) {
				t.Errorf("costText() = %q, want it to contain %q", s, tc.costHas)
			}
			if b := sc.burstMinutes(); !near(b, tc.burstMin) {
				t.Errorf("burstMinutes() = %v, want %v", b, tc.burstMin)
			}
		})
	}
}

func TestRateLimitStartAt(t *testing.T) {
	sc := testRLScenario(4, 1)
	if d := sc.startAt(3); d != 0 {
		t.Errorf("no ramp: session 3 starts at %v, want 0", d)
	}
	sc.Ramp = 4 * time.Second
	for i, want := range []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second} {
		if got := sc.startAt(i); got != want {
			t.Errorf("ramp 4s: session %d starts at %v, want %v", i, got, want)
		}
	}
}

func TestRLRecorder(t *testing.T) {
	sc := testRLScenario(2, 2)
	rec := newRLRecorder(sc)
	start := time.Now()
	rec.restart(start)
	rec.begin(1, 0)
	rec.request(start.Add(100*time.Millisecond), 1, limitedKey, true)
	rec.request(start.Add(1500*time.Millisecond), 1, freeKey, false)
	rec.arrival(start.Add(101*time.Millisecond), limitedKey, true)
	rec.arrival(start.Add(1501*time.Millisecond), freeKey, false)
	rec.wait(start.Add(50*time.Millisecond), 0, freeKey)
	rec.finish(1, 0, true, 47, 30)
	rec.finish(1, 0, true, 47, 30) // counted once
	rec.begin(0, 1)
	rec.finish(0, 1, false, 0, 0)
	if n := rec.finished.Load(); n != 2 {
		t.Errorf("finished %d, want 2", n)
	}
	if rec.requests.Load() != 2 || rec.http429.Load() != 1 {
		t.Errorf("requests %d, 429s %d; want 2, 1", rec.requests.Load(), rec.http429.Load())
	}
	ps := rec.snapshot()
	if p := ps[1*2+0]; !p.begun || !p.ended || !p.ok || p.input != 47 || p.output != 30 || p.end < p.start {
		t.Errorf("session 1, prompt 0: %+v", p)
	}
	if p := ps[0*2+1]; !p.ended || p.ok {
		t.Errorf("session 0, prompt 1: %+v, want ended without an answer", p)
	}
	l := rec.keyLog(start.Add(2*time.Second), true)
	ms := time.Millisecond
	if want := []rlRequest{{100 * ms, 1, limitedKey, true}, {1500 * ms, 1, freeKey, false}}; !reflect.DeepEqual(l.requests, want) {
		t.Errorf("key log's requests %+v, want %+v", l.requests, want)
	}
	if want := []rlArrival{{101 * ms, limitedKey, true}, {1501 * ms, freeKey, false}}; !reflect.DeepEqual(l.arrivals, want) {
		t.Errorf("key log's arrivals %+v, want %+v", l.arrivals, want)
	}
	if want := []rlWait{{50 * ms, 0, freeKey}}; !reflect.DeepEqual(l.waits, want) {
		t.Errorf("key log's waits %+v, want %+v", l.waits, want)
	}
	if l.end != 2*time.Second || !l.paced || l.sc != sc || len(l.prompts) != 4 {
		t.Errorf("key log: end %v, paced %v, %d prompts; want 2s, paced, 4", l.end, l.paced, len(l.prompts))
	}
	tl := rec.timeline(time.Second)
	if !reflect.DeepEqual(tl.Requests, []int{1, 1}) || !reflect.DeepEqual(tl.Refused, []int{1, 0}) || tl.BucketMs != 1000 {
		t.Errorf("timeline %+v, want requests [1 1], refused [1 0] per second", tl)
	}
}

func TestRLRatios(t *testing.T) {
	peer := System{Name: "peer", Figures: map[string]float64{"http_429_responses": 1000, "requests": 8000,
		"p99_prompt_latency_ms": 200_000, "goodput_vs_limit": 0.9}}
	on := System{Name: "musepi-pacing-on", Figures: map[string]float64{"http_429_responses": 10, "requests": 6010,
		"p99_prompt_latency_ms": 100_000, "p99_prompt_latency_ms_high": 5000, "goodput_vs_limit": 0.99}}
	got := rlRatios([]System{peer, on})
	want := []Ratio{
		{"429 responses, musepi-pacing-on / peer", 0.01},
		{"provider requests, musepi-pacing-on / peer", 6010.0 / 8000},
		{"p99 prompt latency, musepi-pacing-on / peer", 0.5},
		{"goodput vs the limit, musepi-pacing-on / peer", 1.1},
	}
	if len(got) != len(want) {
		t.Fatalf("ratios %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Label != want[i].Label || !near(got[i].Value, want[i].Value) {
			t.Errorf("ratio %d = %v, want %v", i, got[i], want[i])
		}
	}
	if r := rlRatios([]System{on}); r != nil {
		t.Errorf("no peer: ratios %v, want none", r)
	}
}

func TestPacingRuns(t *testing.T) {
	for pacing, want := range map[string][]bool{"off": {false}, "on": {true}, "both": {false, true}} {
		if got := pacingRuns(pacing); !reflect.DeepEqual(got, want) {
			t.Errorf("pacingRuns(%q) = %v, want %v", pacing, got, want)
		}
	}
}

// The ratelimit scenario end to end, small: a few hundred prompts, so
// that the keys' token buckets (a minute's worth each) run dry a few
// seconds before the end; fakellm in this process, the OpenAI adapter over
// loopback. The tokens bind, not the requests: a refused request still
// takes one request at fakellm (as at OpenAI), and clients retrying all
// together on a request limit they keep in debt take minutes to get
// through.
func TestRunRateLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs on the wall clock")
	}
	if !alone(t) {
		return
	}
	defer goleak.VerifyNone(t)
	dir := filepath.Join(t.TempDir(), "out")
	// 260 prompts of about 500 tokens as fakellm charges them (max_tokens
	// kept): the keys take 240 at once, then 4 a second.
	const sessions, prompts = 130, 2
	args := []string{"-scenario", "ratelimit", "-sessions", fmt.Sprint(sessions), "-prompts", fmt.Sprint(prompts),
		"-rpm", "6000", "-tpm", "60000", "-quiet", "-out", dir}
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
	if c.Mode != "ratelimit" || len(c.Runs) != 1 || c.Runs[0].Mode != "real" {
		t.Fatalf("mode %q, %d runs; want ratelimit, one real run", c.Mode, len(c.Runs))
	}
	r := c.Runs[0]
	if got, want := systemNames(r), []string{"peer", "musepi-pacing-off", "musepi-pacing-on"}; !reflect.DeepEqual(got, want) {
		t.Errorf("systems %v, want %v", got, want)
	}
	for _, s := range r.Systems {
		checkRateLimitSystem(t, s, sessions*prompts)
	}
	if want := checkTargets("ratelimit", r.Systems); len(c.Targets) != 11 || !reflect.DeepEqual(c.Targets, want) {
		t.Errorf("targets %+v, want the 11 of checkTargets = %+v", c.Targets, want)
	}
	for _, name := range []string{"storm.md", "storm.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !strings.Contains(stdout.String(), "| Figure | peer | musepi-pacing-off | musepi-pacing-on |") {
		t.Errorf("storm.md has no table of the three contenders:\n%s", stdout.String())
	}
}

// checkRateLimitSystem checks what every contender of a ratelimit run
// must report: every prompt answered, the server's counts, the figures.
func checkRateLimitSystem(t *testing.T, s System, prompts int) {
	t.Helper()
	f := s.Figures
	if f["prompts_completed"] != float64(prompts) || f["prompts_lost"] != 0 {
		t.Errorf("%s: %v of %d prompts completed, %v lost", s.Name, f["prompts_completed"], prompts, f["prompts_lost"])
	}
	if f["requests"] < float64(prompts) || f["requests"] != f["requests_sent_harness"] ||
		f["http_429_responses"] != f["http_429_responses_harness"] {
		t.Errorf("%s: requests %v (harness %v), 429s %v (harness %v); want at least one a prompt, and the counts to agree",
			s.Name, f["requests"], f["requests_sent_harness"], f["http_429_responses"], f["http_429_responses_harness"])
	}
	for _, k := range []string{"goodput_vs_limit", "p50_prompt_latency_ms", "p99_prompt_latency_ms",
		"p99_prompt_latency_ms_high", "p99_prompt_latency_ms_low", "jain_fairness", "tokens_per_prompt"} {
		if v, ok := f[k]; !ok || v <= 0 {
			t.Errorf("%s: %s = %v (present %v), want above 0", s.Name, k, v, ok)
		}
	}
	if g := f["goodput_vs_limit"]; g > 1.02 {
		t.Errorf("%s: goodput_vs_limit %v: above the physical limit", s.Name, g)
	}
	if s.Timeline == nil || len(s.Timeline.Requests) == 0 {
		t.Errorf("%s: no timeline", s.Name)
	}
	checkKeyFigures(t, s)
}

// checkKeyFigures checks a contender's per-key figures: each key's and
// their extremes present, the share a share, the peer never moving.
func checkKeyFigures(t *testing.T, s System) {
	t.Helper()
	f := s.Figures
	for _, k := range []string{"max_key_idle_s", "max_admissions_per_second"} {
		a, okA := f[k+"_"+limitedKey]
		b, okB := f[k+"_"+freeKey]
		if !okA || !okB || f[k] != max(a, b) {
			t.Errorf("%s: %s = %v, %s %v (present %v), %s %v (present %v); want the larger of the keys'", s.Name, k, f[k], limitedKey, a, okA, freeKey, b, okB)
		}
	}
	if f["max_admissions_per_second"] < 1 {
		t.Errorf("%s: max_admissions_per_second %v, want at least one", s.Name, f["max_admissions_per_second"])
	}
	share, ok := f["stayed_on_key_share"]
	if !ok || share < 0 || share > 1 || f["turns_with_a_previous_turn"] < f["prompts_completed"]/2 {
		t.Errorf("%s: stayed_on_key_share %v (present %v) over %v turns", s.Name, share, ok, f["turns_with_a_previous_turn"])
	}
	if s.Name == "peer" && share != 1 {
		t.Errorf("peer: stayed_on_key_share %v, want 1 (it never changes key)", share)
	}
}

func TestCheckTargetsRateLimit(t *testing.T) {
	peer := System{Name: "peer", Figures: map[string]float64{"http_429_responses": 2000, "p99_prompt_latency_ms": 300_000}}
	off := System{Name: "musepi-pacing-off", Figures: map[string]float64{"http_429_share": 0.5, "prompts_lost": 0,
		"http_429_responses": 300, "run_minutes": 4}}
	on := System{Name: "musepi-pacing-on", Figures: map[string]float64{
		"http_429_share": 0.005, "http_429_responses": 30, "goodput_vs_limit": 0.97, "p99_prompt_latency_ms": 330_000,
		"p99_high_vs_low": 0.2, "jain_fairness": 0.95, "prompts_lost": 0,
		"max_key_idle_s": 2, "stayed_on_key_share": 0.95, "run_minutes": 5,
	}}
	// Pacing that idles a key, moves turns about, is slow and refuses as
	// many as none.
	slowOff := System{Name: "musepi-pacing-off", Figures: map[string]float64{"http_429_responses": 30, "run_minutes": 2}}
	slowOn := System{Name: "musepi-pacing-on", Figures: map[string]float64{"http_429_responses": 30, "run_minutes": 3.2,
		"max_key_idle_s": 5.5, "stayed_on_key_share": 0.6}}
	cluster := System{Name: "musepi-cluster-3-pacing-on", Figures: map[string]float64{"http_429_share": 0.02, "prompts_lost": 0}}
	for _, tc := range []struct {
		name    string
		mode    string
		systems []System
		want    map[string]expected
	}{
		{"pacing on, against the peer", "ratelimit", []System{peer, off, on}, map[string]expected{
			"429 responses per request, musepi-pacing-on":                        {ptr(0.005), true},
			"429 responses, musepi-pacing-on / peer":                             {ptr(0.015), true},
			"goodput vs the limit, musepi-pacing-on":                             {ptr(0.97), true},
			"p99 prompt latency, musepi-pacing-on / peer":                        {ptr(1.1), false},
			"p99 prompt latency, high priority / low priority, musepi-pacing-on": {ptr(0.2), true},
			"Jain's fairness index, musepi-pacing-on":                            {ptr(0.95), true},
			"prompts lost, musepi-pacing-on":                                     {ptr(0), true},
			"longest key idle while turns wait for it, musepi-pacing-on":         {ptr(2), true},
			"turns on their session's previous key, musepi-pacing-on":            {ptr(0.95), true},
			"run time, musepi-pacing-on / musepi-pacing-off":                     {ptr(1.25), true},
			"429 responses, musepi-pacing-on / musepi-pacing-off":                {ptr(0.1), true},
		}},
		{"pacing that idles keys, moves turns, is slow and refuses as many", "ratelimit", []System{slowOff, slowOn}, map[string]expected{
			"429 responses per request, musepi-pacing-on":                        {nil, false},
			"429 responses, musepi-pacing-on / peer":                             {nil, false},
			"goodput vs the limit, musepi-pacing-on":                             {nil, false},
			"p99 prompt latency, musepi-pacing-on / peer":                        {nil, false},
			"p99 prompt latency, high priority / low priority, musepi-pacing-on": {nil, false},
			"Jain's fairness index, musepi-pacing-on":                            {nil, false},
			"prompts lost, musepi-pacing-on":                                     {nil, false},
			"longest key idle while turns wait for it, musepi-pacing-on":         {ptr(5.5), false},
			"turns on their session's previous key, musepi-pacing-on":            {ptr(0.6), false},
			"run time, musepi-pacing-on / musepi-pacing-off":                     {ptr(1.6), false},
			"429 responses, musepi-pacing-on / musepi-pacing-off":                {ptr(1), false},
		}},
		{"no pacing-on system", "ratelimit", []System{peer, off}, map[string]expected{
			"429 responses per request, musepi-pacing-on":                        {nil, false},
			"429 responses, musepi-pacing-on / peer":                             {nil, false},
			"goodput vs the limit, musepi-pacing-on":                             {nil, false},
			"p99 prompt latency, musepi-pacing-on / peer":                        {nil, false},
			"p99 prompt latency, high priority / low priority, musepi-pacing-on": {nil, false},
			"Jain's fairness index, musepi-pacing-on":                            {nil, false},
			"prompts lost, musepi-pacing-on":                                     {nil, false},
			"longest key idle while turns wait for it, musepi-pacing-on":         {nil, false},
			"turns on their session's previous key, musepi-pacing-on":            {nil, false},
			"run time, musepi-pacing-on / musepi-pacing-off":                     {nil, false},
			"429 responses, musepi-pacing-on / musepi-pacing-off":                {nil, false},
		}},
		{"cluster", "ratelimit-cluster", []System{cluster}, map[string]expected{
			"429 responses per request, musepi-cluster-3-pacing-on": {ptr(0.02), false},
			"prompts lost, musepi-cluster-3-pacing-on":              {ptr(0), true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]expected{}
			for _, r := range checkTargets(tc.mode, tc.systems) {
				if r.Mode != tc.mode {
					t.Errorf("%s: mode %q, want %q", r.Name, r.Mode, tc.mode)
				}
				got[r.Name] = expected{r.Measured, r.Met}
			}
			if len(got) != len(tc.want) {
				t.Errorf("%d results %v, want %d", len(got), got, len(tc.want))
			}
			for name, w := range tc.want {
				g, ok := got[name]
				switch {
				case !ok:
					t.Errorf("no result %q", name)
				case g.met != w.met || (g.measured == nil) != (w.measured == nil) ||
					(g.measured != nil && !near(*g.measured, *w.measured)):
					t.Errorf("%s: measured %v, met %v; want %v, %v", name, fmtPtr(g.measured), g.met, fmtPtr(w.measured), w.met)
				}
			}
		})
	}
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// TestRLProviderKeepsTheAdapterRules: the recording wrapper keeps what
// pacing reads of the adapter under it (its max_tokens, and whether its
// server gives back unused output). Hiding the refund made pacing keep
// Anthropic's max_tokens as if never given back: the Anthropic storm ran
// at a quarter of the keys' limit.
func TestRLProviderKeepsTheAdapterRules(t *testing.T) {
	for _, wire := range []string{"openai", "anthropic"} {
		sc := &rateLimitScenario{Wire: wire, MaxTokens: 256}
		p := &rlProvider{Provider: (&rlServer{base: "http://127.0.0.1:1"}).provider(sc)}
		if got := p.MaxOutputTokens(); got != 256 {
			t.Errorf("%s: MaxOutputTokens = %d, want 256", wire, got)
		}
		if got, want := p.RefundsUnusedOutput(), wire == "anthropic"; got != want {
			t.Errorf("%s: RefundsUnusedOutput = %t, want %t", wire, got, want)
		}
	}
}
