package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/testkit/waiting"
	"go.uber.org/goleak"
)

// TestMain makes the test binary serve the fake LLM when a real-mode run
// re-executes it (as main does), and runs the tests otherwise.
func TestMain(m *testing.M) {
	if file := os.Getenv(serveEnv); file != "" {
		if err := serveFakeLLM(file); err != nil {
			fmt.Fprintln(os.Stderr, "storm fakellm:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The tests that run alone (alone_test.go) wait on the wall clock.
	if err := waiting.Parallel(3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestOutputDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir, err := outputDir("")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != tmp {
		t.Errorf("no -out: wrote into %s, want a new folder in %s", dir, tmp)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Errorf("no -out: %s is not a folder: %v", dir, err)
	}
	if dir, err := outputDir("some/where"); err != nil || dir != "some/where" {
		t.Errorf("-out some/where: %q, %v", dir, err)
	}
}

func TestParseFlags(t *testing.T) {
	defaults := options{
		mix: defaultMix, usageLimit: true, budget: "off", contenders: "floor,peer,musepi",
		maxRetries: 10, baseDelay: 500 * time.Millisecond, maxDelay: 5 * time.Minute,
		passivate: musepi.DefaultPassivateAfter, seed: 1, provider: "fakellm", nodes: 3, scenario: "outage",
	}
	with := func(f func(o *options)) *options {
		o := defaults
		f(&o)
		return &o
	}
	for _, tc := range []struct {
		name   string
		args   []string
		want   *options
		errHas string // when an error is expected
	}{
		{name: "virtual defaults", args: nil,
			want: with(func(o *options) { o.mode, o.sessions, o.outage = "virtual", 100_000, 40*time.Second })},
		{name: "real defaults", args: []string{"-mode", "real"},
			want: with(func(o *options) { o.mode, o.sessions, o.outage = "real", 10_000, 10*time.Second })},
		{name: "explicit values kept", args: []string{"-mode", "real", "-sessions", "7", "-outage", "3s", "-outage-start", "1s",
			"-mix", "503=1", "-usage-limit=false", "-budget", "both", "-contenders", "musepi", "-provider", "inprocess",
			"-max-retries", "3", "-base-delay", "1s", "-max-delay", "2s", "-passivate-after", "0", "-seed", "9", "-out", "x", "-quiet"},
			want: &options{mode: "real", sessions: 7, outage: 3 * time.Second, outageStart: time.Second, mix: "503=1",
				budget: "both", contenders: "musepi", provider: "inprocess", maxRetries: 3, baseDelay: time.Second,
				maxDelay: 2 * time.Second, seed: 9, out: "x", quiet: true, nodes: 3, scenario: "outage"}},
		{name: "cluster defaults", args: []string{"-mode", "cluster"},
			want: with(func(o *options) {
				o.mode, o.sessions, o.outage, o.contenders = "cluster", 2_000, 10*time.Second, "musepi,cluster"
			})},
		{name: "cluster nodes and database", args: []string{"-mode", "cluster", "-nodes", "5", "-database", "postgres://x", "-contenders", "cluster"},
			want: with(func(o *options) {
				o.mode, o.sessions, o.outage, o.contenders, o.nodes, o.database = "cluster", 2_000, 10*time.Second, "cluster", 5, "postgres://x"
			})},
		{name: "cluster in virtual mode", args: []string{"-contenders", "cluster"}, errHas: "cluster runs on the wall clock"},
		{name: "no nodes", args: []string{"-mode", "cluster", "-nodes", "0"}, errHas: "-nodes must be 1 or more, got 0"},
		{name: "both defaults", args: []string{"-mode", "both"},
			want: with(func(o *options) {
				o.mode = "both"
				o.runs = []*options{
					with(func(o *options) { o.mode, o.sessions, o.outage = "virtual", 100_000, 40*time.Second }),
					with(func(o *options) { o.mode, o.sessions, o.outage = "real", 10_000, 10*time.Second }),
				}
			})},
		{name: "both with flags set", args: []string{"-mode", "both", "-sessions", "500", "-quiet", "-out", "x", "-cpuprofile", "cpu.prof"},
			want: with(func(o *options) {
				o.mode, o.sessions, o.quiet, o.out, o.cpuProfile = "both", 500, true, "x", "cpu.prof"
				o.runs = []*options{
					with(func(o *options) {
						o.mode, o.sessions, o.outage, o.quiet, o.out, o.cpuProfile = "virtual", 500, 40*time.Second, true, "x", "cpu.prof.virtual"
					}),
					with(func(o *options) {
						o.mode, o.sessions, o.outage, o.quiet, o.out, o.cpuProfile = "real", 500, 10*time.Second, true, "x", "cpu.prof.real"
					}),
				}
			})},
		{name: "both with a cluster contender", args: []string{"-mode", "both", "-contenders", "musepi,cluster"},
			errHas: "-mode both, virtual run: -contenders: cluster runs on the wall clock"},
		{name: "both with bad sessions", args: []string{"-mode", "both", "-sessions", "0"},
			errHas: "-mode both, virtual run: -sessions must be 1 or more, got 0"},
		{name: "budget on", args: []string{"-budget", "on"},
			want: with(func(o *options) { o.mode, o.sessions, o.outage, o.budget = "virtual", 100_000, 40*time.Second, "on" })},
		{name: "bad mode", args: []string{"-mode", "wall"}, errHas: `-mode must be virtual, real, both or cluster, got "wall"`},
		{name: "zero sessions", args: []string{"-sessions", "0"}, errHas: "-sessions must be 1 or more, got 0"},
		{name: "negative sessions", args: []string{"-sessions", "-5"}, errHas: "-sessions must be 1 or more, got -5"},
		{name: "non-numeric sessions", args: []string{"-sessions", "many"}, errHas: "-sessions"},
		{name: "negative outage", args: []string{"-outage", "-1s"}, errHas: "-outage must be above 0"},
		{name: "zero outage", args: []string{"-outage", "0"}, errHas: "-outage must be above 0"},
		{name: "negative outage start", args: []string{"-outage-start", "-1s"}, errHas: "must not be negative"},
		{name: "bad budget", args: []string{"-budget", "maybe"}, errHas: `-budget must be off, on or both, got "maybe"`},
		{name: "bad provider", args: []string{"-mode", "real", "-provider", "anthropic"}, errHas: `-provider must be fakellm or inprocess, got "anthropic"`},
		{name: "unknown contender", args: []string{"-contenders", "floor,rival"}, errHas: `unknown contender "rival"`},
		{name: "empty contender", args: []string{"-contenders", "peer,"}, errHas: `unknown contender ""`},
		{name: "extra arguments", args: []string{"-quiet", "now", "please"}, errHas: `unexpected arguments ["now" "please"]`},
		{name: "unknown flag", args: []string{"-fast"}, errHas: "-fast"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if tc.errHas != "" {
				if err == nil {
					t.Fatalf("parseFlags(%q) = %+v, want an error containing %q", tc.args, *o, tc.errHas)
				}
				if !strings.Contains(err.Error(), tc.errHas) {
					t.Errorf("parseFlags(%q): error %q, want it to contain %q", tc.args, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", tc.args, err)
			}
			if !reflect.DeepEqual(o, tc.want) {
				t.Errorf("parseFlags(%q) =\n %+v\nwant\n %+v", tc.args, *o, *tc.want)
			}
		})
	}
}

func TestRatios(t *testing.T) {
	floor := System{Name: "floor", Figures: map[string]float64{
		"cpu_us_per_attempt": 2, "bytes_per_waiting_session": 100, // no lateness
	}}
	peer := System{Name: "peer", Figures: map[string]float64{
		"cpu_us_per_attempt": 10, "bytes_per_waiting_session": 0, // zero: skipped
		"lateness_p99_ms": 4, "first_wave_lateness_p99_ms": 0, // zero: skipped
		"peak_heap_mb": 100, "peak_memory_mb": 400,
	}}
	musepi := System{Name: "musepi", Figures: map[string]float64{
		"cpu_us_per_attempt": 4, "bytes_per_waiting_session": 500, "lateness_p99_ms": 2, "first_wave_lateness_p99_ms": 3,
		"peak_heap_mb": 300, "peak_memory_mb": 600,
	}}
	budgetOn := System{Name: "musepi-budget-on", Figures: map[string]float64{"cpu_us_per_attempt": 8}} // the rest missing
	for _, tc := range []struct {
		name    string
		systems []System
		want    []Ratio
	}{
		{"floor, peer, musepi", []System{floor, peer, musepi}, []Ratio{
			{"CPU per attempt, musepi / floor", 2},
			{"memory per waiting session, musepi / floor", 5},
			{"CPU per attempt, musepi / peer", 0.4},
			{"peak heap, musepi / peer", 3},
			{"peak heap + goroutine stacks, musepi / peer", 1.5},
			{"p99 wake-up lateness, musepi / peer", 0.5},
		}},
		{"musepi first", []System{musepi, floor}, []Ratio{
			{"CPU per attempt, musepi / floor", 2},
			{"memory per waiting session, musepi / floor", 5},
		}},
		{"two musepi systems, no floor", []System{peer, musepi, budgetOn}, []Ratio{
			{"CPU per attempt, musepi / peer", 0.4},
			{"peak heap, musepi / peer", 3},
			{"peak heap + goroutine stacks, musepi / peer", 1.5},
			{"p99 wake-up lateness, musepi / peer", 0.5},
			{"CPU per attempt, musepi-budget-on / peer", 0.8},
		}},
		{"no musepi", []System{floor, peer}, nil},
		{"musepi alone", []System{musepi}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ratios(tc.systems); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ratios =\n %v\nwant\n %v", got, tc.want)
			}
		})
	}
}

func TestBudgetRuns(t *testing.T) {
	for _, tc := range []struct {
		budget string
		want   []bool
	}{
		{"off", []bool{false}},
		{"on", []bool{true}},
		{"both", []bool{false, true}},
	} {
		if got := budgetRuns(tc.budget); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("budgetRuns(%q) = %v, want %v", tc.budget, got, tc.want)
		}
	}
}

// readReport checks that run wrote its three files into dir and decodes
// storm.json.
func readReport(t *testing.T, dir string) *Report {
	t.Helper()
	for _, name := range []string{"storm.md", "storm.json", "storm.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v (size %v)", name, err, fi)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "storm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("storm.json: %v", err)
	}
	return &r
}

func systemNames(r *Report) []string {
	var names []string
	for _, s := range r.Systems {
		names = append(names, s.Name)
	}
	return names
}

// checkNothingLost checks every prompt of the named systems completed.
func checkNothingLost(t *testing.T, r *Report, sessions int, names ...string) {
	t.Helper()
	for _, s := range r.Systems {
		for _, n := range names {
			if s.Name != n {
				continue
			}
			lost, ok := s.Figures["prompts_lost"]
			if !ok || lost != 0 {
				t.Errorf("%s: prompts_lost = %v (present %v), want 0", s.Name, lost, ok)
			}
			if got := s.Figures["prompts_completed"]; got != float64(sessions) {
				t.Errorf("%s: prompts_completed = %v, want %d", s.Name, got, sessions)
			}
		}
	}
}

func TestRunVirtual(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := filepath.Join(t.TempDir(), "out")
	args := []string{"-sessions", "300", "-outage", "3s", "-quiet", "-out", dir}
	if err := run(args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	r := readReport(t, dir)
	if got, want := systemNames(r), []string{"floor", "peer", "musepi"}; !reflect.DeepEqual(got, want) {
		t.Errorf("systems %v, want %v", got, want)
	}
	checkNothingLost(t, r, 300, "peer", "musepi")
	if r.Mode != "virtual" || r.Sessions != 300 || r.OutageStartMs != 0 || r.OutageEndMs != 3000 {
		t.Errorf("mode %q, sessions %d, outage [%d, %d] ms; want virtual, 300, [0, 3000]", r.Mode, r.Sessions, r.OutageStartMs, r.OutageEndMs)
	}
	if want := "go run ./bench/storm " + strings.Join(args, " "); r.Command != want {
		t.Errorf("command %q, want %q", r.Command, want)
	}
	if !strings.Contains(r.Scenario, "mix "+defaultMix) {
		t.Errorf("scenario %q does not name the default mix", r.Scenario)
	}
	if got := ratios(r.Systems); !reflect.DeepEqual(r.Ratios, got) {
		t.Errorf("ratios %v, want ratios(systems) = %v", r.Ratios, got)
	}
	checkTargetsOf(t, r, 6)
	md, err := os.ReadFile(filepath.Join(dir, "storm.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| Figure | floor | peer | musepi |") {
		t.Errorf("storm.md has no table for floor, peer, musepi:\n%s", md)
	}
}

// checkTargetsOf checks that r's targets are its mode's, checked on its
// systems, n of them.
func checkTargetsOf(t *testing.T, r *Report, n int) {
	t.Helper()
	if want := checkTargets(r.Mode, r.Systems); len(r.Targets) != n || !reflect.DeepEqual(r.Targets, want) {
		t.Errorf("%s run: %d targets %+v, want the %d of checkTargets(mode, systems) = %+v", r.Mode, len(r.Targets), r.Targets, n, want)
	}
}

// -mode both end to end, small: the virtual run, then the real run (the
// fake LLM in a child process, see TestMain), one storm.json with both.
func TestRunBoth(t *testing.T) {
	if testing.Short() {
		t.Skip("the real run runs on the wall clock")
	}
	defer goleak.VerifyNone(t)
	dir := filepath.Join(t.TempDir(), "out")
	const sessions = 100
	args := []string{"-mode", "both", "-sessions", fmt.Sprint(sessions), "-outage", "1s", "-contenders", "musepi", "-quiet", "-out", dir}
	var stdout strings.Builder
	if err := run(args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"storm.md", "storm.json", "storm-virtual.svg", "storm-real.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v (size %v)", name, err, fi)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "storm.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c Combined
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("storm.json: %v", err)
	}
	if len(c.Runs) != 2 || c.Runs[0].Mode != "virtual" || c.Runs[1].Mode != "real" || c.Mode != "both" {
		t.Fatalf("mode %q, runs %d (%+v); want both: virtual, then real", c.Mode, len(c.Runs), c.Runs)
	}
	var targets []TargetResult
	for i, r := range c.Runs {
		checkNothingLost(t, r, sessions, "musepi")
		if got, want := systemNames(r), []string{"musepi"}; !reflect.DeepEqual(got, want) {
			t.Errorf("%s run: systems %v, want %v", r.Mode, got, want)
		}
		checkTargetsOf(t, r, []int{6, 5}[i])
		targets = append(targets, r.Targets...)
	}
	if _, ok := c.Runs[1].Systems[0].Figures["lateness_p99_ms"]; !ok {
		t.Errorf("real run: MusePi has no lateness (not run on the wall clock?)")
	}
	if !reflect.DeepEqual(c.Targets, targets) {
		t.Errorf("targets %+v, want the runs' %+v", c.Targets, targets)
	}
	md, err := os.ReadFile(filepath.Join(dir, "storm.md"))
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != string(md) {
		t.Errorf("stdout is not storm.md:\n%s", stdout.String())
	}
	checkOrder(t, string(md), "## virtual mode", "## real mode", "## Targets")
}

func TestRunBadFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	for _, args := range [][]string{
		{"-mix", "429=0", "-out", dir},
		{"-max-retries", "-1", "-out", dir},
		{"-mode", "nope", "-out", dir},
		{"-scenario", "ratelimit", "-max-retries", "-1", "-out", dir},
		{"-scenario", "ratelimit", "-base-delay", "-1s", "-out", dir},
	} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q): no error", args)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a failed run created %s (%v)", dir, err)
	}
}

// The real mode end to end: the fake LLM in a child process (this test
// binary again, see TestMain), the OpenAI provider over loopback.
func TestRunRealMode(t *testing.T) {
	if testing.Short() {
		t.Skip("real mode runs on the wall clock")
	}
	if !alone(t) {
		return
	}
	defer goleak.VerifyNone(t)
	dir := filepath.Join(t.TempDir(), "out")
	const sessions = 200
	if err := run([]string{"-mode", "real", "-sessions", fmt.Sprint(sessions), "-outage", "2s",
		"-contenders", "peer,musepi", "-quiet", "-out", dir}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	r := readReport(t, dir)
	if got, want := systemNames(r), []string{"peer", "musepi"}; !reflect.DeepEqual(got, want) {
		t.Errorf("systems %v, want %v", got, want)
	}
	checkNothingLost(t, r, sessions, "peer", "musepi")
	for _, s := range r.Systems {
		if got := s.Figures["requests_outage"]; got <= sessions {
			t.Errorf("%s: requests_outage = %v, want more than %d (the fake server's outage)", s.Name, got, sessions)
		}
		if _, ok := s.Figures["lateness_p99_ms"]; !ok {
			t.Errorf("%s: no lateness in real mode", s.Name)
		}
	}
}

// serveFakeLLM says it stops "on SIGTERM or when its parent's stdout
// closes": a parent that dies without stopping it (SIGKILL, a test binary's
// timeout panic) closes the pipe, and the child must not outlive it.
func TestFakeLLMChildStopsWhenStdinCloses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	defer goleak.VerifyNone(t)
	data, err := json.Marshal(testScenario(t, time.Second, "503=1").fakellm())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "scenario.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), serveEnv+"="+file)
	cmd.Stderr = os.Stderr
	lifeline, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	line, err := bufio.NewReader(out).ReadString('\n')
	lifeline.Close() // what the parent's death does to the pipe
	go func() { done <- cmd.Wait() }()
	if err != nil || !strings.HasPrefix(line, "http://127.0.0.1:") {
		t.Errorf("child reported %q, %v; want its loopback base URL", line, err)
	}
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Errorf("fake LLM child still running 3 s after its stdin closed")
		_ = cmd.Process.Kill()
		<-done
	}
}
