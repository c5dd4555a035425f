// Command storm is MusePi's retry-storm harness: N sessions send a prompt
// at the same instant into a provider outage, ride it out, and complete
// after it. It runs three contenders on the same sessions and scenario —
// the floor (protoactor-go's raw message cost), the peer (a goroutine per
// session with cenkalti/backoff/v5) and MusePi — and writes storm.md,
// storm.json and storm.svg into -out (default: a new temporary folder).
// Each run checks the project's performance targets of its mode (issue 27,
// the targets table of targets.go) against what it measured: storm.json's
// targets list (mode, name, measured, bound, comparison, met) and
// storm.md's Targets table. -mode both runs the virtual run and then the
// real run, each as its mode alone would with the same flags (a flag left
// unset keeps each mode's default), and writes one storm.json (its runs
// and the targets of both), one storm.md and each run's plot,
// storm-virtual.svg and storm-real.svg. See bench/README.md.
//
//	go run ./bench/storm                         # virtual clock, 100,000 sessions
//	go run ./bench/storm -mode real              # wall clock, fakellm over loopback, 10,000 sessions
//	go run ./bench/storm -mode both -quiet       # both runs, one after the other, and every target
//	go run ./bench/storm -mode real -budget both # retry budget on vs off
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
)

// serveEnv, when set to a scenario file, makes the binary the fake LLM
// server of a real-mode run (a child process, so that its CPU is not
// counted against the contenders).
const serveEnv = "MUSEPI_STORM_FAKELLM"

// msgsPerAttempt is how many actor messages one plain retry attempt takes
// in MusePi (the turn's end, arm the backoff timer, schedule the continue,
// the continue is due: BenchmarkRetryAttempt), which the floor passes too.
// MusePi's own figure, counted during its run, is in its
// messages_per_attempt.
const msgsPerAttempt = 4

func main() {
	if file := os.Getenv(serveEnv); file != "" {
		if err := serveFakeLLM(file); err != nil {
			fmt.Fprintln(os.Stderr, "storm fakellm:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	mode        string
	sessions    int
	outage      time.Duration
	outageStart time.Duration
	mix         string
	usageLimit  bool
	budget      string
	contenders  string
	maxRetries  int
	baseDelay   time.Duration
	maxDelay    time.Duration
	passivate   time.Duration
	seed        uint64
	out         string
	quiet       bool
	provider    string
	ramp        time.Duration
	cpuProfile  string
	heapProfile string
	nodes       int
	database    string
	// scenario is "outage" (the retry storm) or "ratelimit" (issue 28's
	// pacing storm, ratelimit.go); the fields after it are the ratelimit
	// scenario's own (zero in the outage scenario).
	scenario     string
	prompts      int
	rpm, tpm     int64
	highPercent  int
	pacing       string // MusePi's runs: off, on or both
	pacingLimits string // headers or configured
	maxTokens    int64
	timeout      time.Duration
	keys         int    // the keys sessions share
	wire         string // the API fakellm speaks: openai or anthropic
	itpm, otpm   int64  // Anthropic's input and output tokens per minute
	window       time.Duration
	// The overload scenario's own (overload_flags.go): the model's
	// capacity, its low capacity, and when the low window starts (-window
	// is its length).
	capacity, lowCapacity int
	lowStart              time.Duration
	// runs are -mode both's runs, in bothModes' order, each with the
	// options its mode alone would have (nil in the other modes).
	runs []*options
}

// bothModes are the modes -mode both runs, in order.
var bothModes = []string{"virtual", "real"}

// parseFlags parses the command's flags. With -mode both, the options'
// runs are parsed from the same flags as if -mode named their mode, so
// that a flag left unset keeps each mode's own default.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	return parseFlagsAs(args, stderr, "")
}

// parseFlagsAs is parseFlags with -mode taken to be mode, unless mode is
// empty.
func parseFlagsAs(args []string, stderr io.Writer, mode string) (*options, error) {
	o := &options{}
	fs := newFlagSet(o, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if mode != "" {
		o.mode = mode
	}
	if o.mode == "both" && o.scenario == "outage" {
		return withRuns(o, args)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch o.scenario {
	case "ratelimit":
		return o, rateLimitOptions(o, set)
	case "overload":
		return o, overloadOptions(o, set)
	case "outage":
		if err := outageOnly(set); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("-scenario must be outage, ratelimit or overload, got %q", o.scenario)
	}
	if err := applyModeDefaults(o, set); err != nil {
		return nil, err
	}
	if err := validate(o); err != nil {
		return nil, err
	}
	return o, nil
}

// newFlagSet defines the command's flags, stored into o.
func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mode, "mode", "virtual", "virtual (virtual clock, in-process provider), real (wall clock, OpenAI SDK, fakellm over loopback), both (virtual, then real, with the same flags; one storm.json and storm.md) or cluster (real, MusePi on one node then on -nodes nodes)")
	fs.IntVar(&o.nodes, "nodes", 3, "cluster mode: the nodes of the cluster contender")
	fs.StringVar(&o.database, "database", "", "cluster mode: PostgreSQL URL the nodes share (each run makes a database of its own); empty: a private server (initdb and postgres, run as the postgres user when root)")
	fs.IntVar(&o.sessions, "sessions", 0, "sessions (default 100000 virtual, 10000 real)")
	fs.DurationVar(&o.outage, "outage", 0, "outage length (default 40s virtual: every session rides out ~10 attempts; 10s real)")
	fs.DurationVar(&o.outageStart, "outage-start", 0, "outage start, from the start of the run")
	fs.DurationVar(&o.ramp, "ramp", 0, "send the prompts spread evenly over this long instead of all at once")
	fs.StringVar(&o.mix, "mix", "429=30,429-hint=10,503=40,overload=20", "error mix during the outage, kind=weight; kinds: "+strings.Join(kindNames(), ", "))
	fs.BoolVar(&o.usageLimit, "usage-limit", true, "key "+limitedKey+" (half the sessions start on it) answers usage limits during the outage")
	fs.StringVar(&o.provider, "provider", "fakellm", "real mode's provider: fakellm (OpenAI SDK to the fake server over loopback) or inprocess (the virtual mode's provider on the wall clock: timers and actors without HTTP)")
	fs.StringVar(&o.budget, "budget", "off", "MusePi's retry budget: off, on, or both (MusePi runs twice)")
	fs.StringVar(&o.contenders, "contenders", "floor,peer,musepi", "which contenders run, in order")
	fs.IntVar(&o.maxRetries, "max-retries", 10, "retry.maxRetries for MusePi and the peer")
	fs.DurationVar(&o.baseDelay, "base-delay", 500*time.Millisecond, "retry.baseDelayMs for MusePi and the peer")
	fs.DurationVar(&o.maxDelay, "max-delay", 5*time.Minute, "retry.maxDelayMs")
	fs.DurationVar(&o.passivate, "passivate-after", musepi.DefaultPassivateAfter, "MusePi's WithPassivateAfter: sessions in a backoff at least this long leave their actors (0: never)")
	fs.Uint64Var(&o.seed, "seed", 1, "jitter seed")
	fs.StringVar(&o.out, "out", "", "output folder for storm.md, storm.json, storm.svg (-mode both: storm-virtual.svg and storm-real.svg) (default: a new temporary folder, printed at the end)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress bars")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (-mode both: one per mode, suffixed .virtual and .real)")
	fs.StringVar(&o.heapProfile, "heapprofile", "", "write each contender's heap profile at mid-outage to this file, suffixed .<contender> (-mode both: .<mode>.<contender>)")
	fs.StringVar(&o.scenario, "scenario", "outage", "outage (sessions ride out a provider outage), ratelimit (sessions send prompts to two rate-limited keys: pacing, issue 28) or overload (sessions send prompts to a model whose capacity drops: the overload limiter, issue 40)")
	fs.IntVar(&o.capacity, "capacity", 0, "overload: the model's calls in flight (default 200)")
	fs.IntVar(&o.lowCapacity, "low-capacity", 0, "overload: the model's calls in flight in the low window (default 40)")
	fs.DurationVar(&o.lowStart, "low-start", 0, "overload: when the low window starts, from the first prompt (default 10s)")
	fs.IntVar(&o.prompts, "prompts", 0, "ratelimit: prompts per session, one after the other (default 3)")
	fs.Int64Var(&o.rpm, "rpm", 0, "ratelimit: requests per minute of each key (default 600)")
	fs.Int64Var(&o.tpm, "tpm", 0, "ratelimit: tokens per minute of each key (default 200000; -wire anthropic: 0, a total of input and output)")
	fs.IntVar(&o.highPercent, "high", 0, "ratelimit: percent of the sessions at high priority, the rest low (default 20)")
	fs.StringVar(&o.pacing, "pacing", "", "ratelimit: MusePi's pacing: off, on or both (MusePi runs twice; default both, cluster mode on)")
	fs.StringVar(&o.pacingLimits, "pacing-limits", "", "ratelimit: where MusePi's pacing takes the keys' limits from: headers (learnt from the responses) or configured (Credential.RateLimits, corrected by the headers) (default configured)")
	fs.Int64Var(&o.maxTokens, "max-tokens", 0, "ratelimit: max_tokens of every request, 0 for none (default 256)")
	fs.IntVar(&o.keys, "keys", 0, "ratelimit: API keys, each with the limits -rpm and -tpm (default 2)")
	fs.Int64Var(&o.itpm, "itpm", 0, "ratelimit, -wire anthropic: input tokens per minute of each key (default 200000)")
	fs.Int64Var(&o.otpm, "otpm", 0, "ratelimit, -wire anthropic: output tokens per minute of each key (default 40000)")
	fs.DurationVar(&o.window, "window", 0, "ratelimit: fakellm enforces each per-minute limit over windows this long (whole ms, up to 1m; 0: the minute); overload: the low window's length (default 60s)")
	fs.StringVar(&o.wire, "wire", "", "ratelimit: the API fakellm speaks and the adapter MusePi and the peer use: openai (Chat Completions, the openai-go SDK) or anthropic (Messages, the anthropic-sdk-go SDK) (default openai)")
	fs.DurationVar(&o.timeout, "timeout", 0, "ratelimit: a contender still running after this long is stopped, its unfinished prompts lost (default 20m)")
	return fs
}

// withRuns fills in the runs of o, the options of -mode both parsed from
// args: each mode's options parsed from the same args, their profiles
// suffixed with the mode so that the real run does not overwrite the
// virtual run's.
func withRuns(o *options, args []string) (*options, error) {
	for _, mode := range bothModes {
		r, err := parseFlagsAs(args, io.Discard, mode)
		if err != nil {
			return nil, fmt.Errorf("-mode both, %s run: %w", mode, err)
		}
		r.cpuProfile, r.heapProfile = suffixed(r.cpuProfile, mode), suffixed(r.heapProfile, mode)
		o.runs = append(o.runs, r)
	}
	return o, nil
}

// suffixed is path with "."+suffix appended, or "" when path is empty.
func suffixed(path, suffix string) string {
	if path == "" {
		return ""
	}
	return path + "." + suffix
}

// applyModeDefaults gives the flags whose default depends on the mode,
// among those not set (the names in set), their mode's default.
func applyModeDefaults(o *options, set map[string]bool) error {
	sessions, outage := 100_000, 40*time.Second
	switch o.mode {
	case "virtual":
	case "real":
		sessions, outage = 10_000, 10*time.Second
	case "cluster":
		// Every history entry goes to PostgreSQL: a few thousand sessions
		// keep a 2-core machine's database within what it writes.
		sessions, outage = 2_000, 10*time.Second
		if !set["contenders"] {
			o.contenders = "musepi,cluster"
		}
	default:
		return fmt.Errorf("-mode must be virtual, real, both or cluster, got %q", o.mode)
	}
	if !set["sessions"] {
		o.sessions = sessions
	}
	if !set["outage"] {
		o.outage = outage
	}
	return nil
}

// validate checks the values of the flags of one mode's run.
func validate(o *options) error {
	switch {
	case o.sessions < 1:
		return fmt.Errorf("-sessions must be 1 or more, got %d", o.sessions)
	case o.outage <= 0:
		return fmt.Errorf("-outage must be above 0, got %v", o.outage)
	case o.outageStart < 0:
		return fmt.Errorf("-outage-start must not be negative, got %v", o.outageStart)
	case o.nodes < 1:
		return fmt.Errorf("-nodes must be 1 or more, got %d", o.nodes)
	case o.ramp < 0:
		return fmt.Errorf("-ramp must not be negative, got %v", o.ramp)
	case o.provider != "fakellm" && o.provider != "inprocess":
		return fmt.Errorf("-provider must be fakellm or inprocess, got %q", o.provider)
	case o.budget != "off" && o.budget != "on" && o.budget != "both":
		return fmt.Errorf("-budget must be off, on or both, got %q", o.budget)
	}
	for _, c := range strings.Split(o.contenders, ",") {
		switch {
		case c == "cluster" && o.mode == "virtual":
			return fmt.Errorf("-contenders: cluster runs on the wall clock (-mode real or cluster)")
		case c != "floor" && c != "peer" && c != "musepi" && c != "cluster":
			return fmt.Errorf("-contenders: unknown contender %q (floor, peer, musepi, cluster)", c)
		}
	}
	return nil
}

// run parses the flags, runs the contenders (with -mode both, the virtual
// run's, then the real run's) and writes the outputs; the table goes to
// stdout, progress and notices to stderr.
func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	command := "go run ./bench/storm " + strings.Join(args, " ")
	if measure, files := scenarioRun(o.scenario); measure != nil {
		stopProfile, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		raiseFileLimit()
		c, err := measure(ctx, o, command, stderr)
		stopProfile()
		if err != nil {
			return err
		}
		return publish(o.out, files(c), stdout, stderr)
	}
	if o.mode == "both" {
		c, err := measureBoth(ctx, o, command, stderr)
		if err != nil {
			return err
		}
		return publish(o.out, combinedFiles(c), stdout, stderr)
	}
	r, err := measure(ctx, o, command, stderr)
	if err != nil {
		return err
	}
	return publish(o.out, reportFiles(r), stdout, stderr)
}

// measureBoth runs each of o's runs in turn, each as its mode would run
// alone, and gathers their reports and targets.
func measureBoth(ctx context.Context, o *options, command string, stderr io.Writer) (*Combined, error) {
	c := &Combined{Command: command, Mode: o.mode, Started: time.Now(), Targets: []TargetResult{}}
	for i, ro := range o.runs {
		if i > 0 {
			// The run before left its heap to the runtime: handed back to
			// the system now, it costs the next run no scavenging, as in a
			// process of its own.
			debug.FreeOSMemory()
		}
		r, err := measure(ctx, ro, command, stderr)
		if err != nil {
			return nil, fmt.Errorf("%s run: %w", ro.mode, err)
		}
		c.Runs = append(c.Runs, r)
		c.Targets = append(c.Targets, r.Targets...)
	}
	c.Elapsed = time.Since(c.Started)
	return c, nil
}

// measure runs the contenders of one mode's run (o's mode: virtual, real
// or cluster) and reports what they measured, the ratios and the targets.
func measure(ctx context.Context, o *options, command string, stderr io.Writer) (*Report, error) {
	sc, settings, err := scenarioOf(o)
	if err != nil {
		return nil, err
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	e := newEnv(o, sc, settings, stderr)
	stopProvider, err := prepareProvider(ctx, e, o)
	if err != nil {
		return nil, err
	}
	defer stopProvider()
	report := &Report{
		Command: command, Mode: o.mode, Sessions: o.sessions,
		GoVersion: runtime.Version(), CPUs: runtime.GOMAXPROCS(0), Started: time.Now(),
		OutageStartMs: sc.OutageStart.Milliseconds(), OutageEndMs: (sc.OutageStart + sc.OutageLen).Milliseconds(),
		Scenario: sc.String(),
	}
	if report.Systems, err = runContenders(ctx, e, o); err != nil {
		return nil, err
	}
	report.Ratios = ratios(report.Systems)
	report.Targets = checkTargets(report.Mode, report.Systems)
	report.Notes = notes(o)
	report.Elapsed = time.Since(report.Started)
	return report, nil
}

// scenarioOf is the scenario and the retry settings o asks for.
func scenarioOf(o *options) (*Scenario, retry.Settings, error) {
	mix, err := parseMix(o.mix)
	if err != nil {
		return nil, retry.Settings{}, err
	}
	sc := &Scenario{OutageStart: o.outageStart, OutageLen: o.outage, Mix: mix, UsageLimit: o.usageLimit, Ramp: o.ramp}
	settings := retry.DefaultSettings()
	settings.MaxRetries, settings.BaseDelay, settings.MaxDelay = o.maxRetries, o.baseDelay, o.maxDelay
	settings.ModelFallback = false
	settings.Budget.Enabled = true // validated here; each MusePi run sets it on or off
	if err := settings.Validate(); err != nil {
		return nil, retry.Settings{}, err
	}
	return sc, settings, nil
}

// startCPUProfile starts a CPU profile written to path, and returns what
// stops it; with an empty path, nothing is profiled.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// newEnv is the env the contenders of o's run share, its provider not yet
// prepared (prepareProvider).
func newEnv(o *options, sc *Scenario, settings retry.Settings, stderr io.Writer) *env {
	mode := o.mode
	if mode == "cluster" {
		mode = "real"
	}
	e := &env{mode: mode, sessions: o.sessions, scenario: sc, settings: settings, seed: o.seed, passivate: o.passivate,
		budgetCompared: o.budget == "both", heapProfile: o.heapProfile}
	e.progress = func(label string, total int) *progress {
		w := stderr
		if o.quiet {
			w = io.Discard
		}
		return newProgress(w, fmt.Sprintf("%-18s", label), total)
	}
	return e
}

// prepareProvider sets e.newRun for o's mode and provider: the scenario
// in process on the virtual or the wall clock, or the fake server (a
// child process) over loopback. It returns what stops the fake server.
func prepareProvider(ctx context.Context, e *env, o *options) (stop func(), err error) {
	sc := e.scenario
	switch {
	case o.mode == "virtual":
		e.newRun = func() (clock.Clock, provider.Provider, *recorder, func(), error) {
			vc := clock.NewVirtual(time.Unix(0, 0))
			vc.SetResolution(time.Millisecond)
			rec := newRecorder(vc.Now())
			return vc, &scenarioProvider{sc: sc, clk: vc, start: vc.Now(), rec: rec}, rec, func() {}, nil
		}
	case o.provider == "inprocess":
		e.newRun = func() (clock.Clock, provider.Provider, *recorder, func(), error) {
			clk := clock.Real{}
			rec := newRecorder(clk.Now())
			return clk, &scenarioProvider{sc: sc, clk: clk, start: clk.Now(), rec: rec}, rec, func() {}, nil
		}
	default:
		raiseFileLimit()
		srv, err := startFakeLLM(ctx, sc)
		if err != nil {
			return nil, err
		}
		e.newRun = srv.newRun
		return srv.stop, nil
	}
	return func() {}, nil
}

// runContenders runs o's contenders in order on e and returns what each
// measured; the cluster contender's database is stopped when they are
// done.
func runContenders(ctx context.Context, e *env, o *options) ([]System, error) {
	defer func() {
		if e.db != nil {
			e.db.stop()
		}
	}()
	var systems []System
	for _, c := range strings.Split(o.contenders, ",") {
		s, err := runContender(ctx, e, o, c)
		if err != nil {
			return nil, err
		}
		systems = append(systems, s...)
	}
	return systems, nil
}

// runContender runs the contender named name: one system, or MusePi's
// once per budget setting.
func runContender(ctx context.Context, e *env, o *options, name string) ([]System, error) {
	switch name {
	case "floor":
		s, err := runFloor(ctx, e, msgsPerAttempt, o.sessions*o.maxRetries)
		return []System{s}, err
	case "peer":
		s, err := runPeer(ctx, e)
		return []System{s}, err
	case "musepi":
		return runMusePis(ctx, e, o.budget, 0)
	case "cluster":
		if e.db == nil {
			db, err := startClusterDB(ctx, o.database)
			if err != nil {
				return nil, err
			}
			e.db = db
		}
		return runMusePis(ctx, e, o.budget, o.nodes)
	}
	return nil, fmt.Errorf("unknown contender %q", name)
}

// runMusePis runs MusePi (on nodes nodes; 0: one runtime, not a cluster)
// once per setting of budget.
func runMusePis(ctx context.Context, e *env, budget string, nodes int) ([]System, error) {
	var systems []System
	for _, on := range budgetRuns(budget) {
		s, err := runMusePi(ctx, e, on, nodes)
		if err != nil {
			return nil, err
		}
		systems = append(systems, s)
	}
	return systems, nil
}

// publish writes files into the folder out names (outputDir), says where
// on stderr, and writes the first of them, storm.md, to stdout.
func publish(out string, files []outputFile, stdout, stderr io.Writer) error {
	dir, err := outputDir(out)
	if err != nil {
		return err
	}
	if err := writeFiles(dir, files); err != nil {
		return err
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.name
	}
	names[0] = filepath.Join(dir, names[0])
	last := len(names) - 1
	fmt.Fprintf(stderr, "wrote %s and %s\n", strings.Join(names[:last], ", "), names[last])
	return files[0].render(stdout)
}

// outputDir is the folder the outputs go to: out when -out was given,
// otherwise a new temporary folder, so that a run leaves nothing in the
// working tree unless asked to.
func outputDir(out string) (string, error) {
	if out != "" {
		return out, nil
	}
	dir, err := os.MkdirTemp("", "storm-")
	if err != nil {
		return "", fmt.Errorf("output folder: %w", err)
	}
	return dir, nil
}

// budgetRuns are the budget settings MusePi runs with.
func budgetRuns(budget string) []bool {
	switch budget {
	case "on":
		return []bool{true}
	case "both":
		return []bool{false, true}
	}
	return []bool{false}
}

// ratios compares MusePi (each MusePi system) with the floor and the peer
// on CPU per attempt, memory per waiting session, peak memory and
// lateness.
func ratios(systems []System) []Ratio {
	byName := map[string]System{}
	for _, s := range systems {
		byName[s.Name] = s
	}
	var out []Ratio
	for _, m := range systems {
		if !strings.HasPrefix(m.Name, "musepi") {
			continue
		}
		if single, ok := byName[singleNodeOf(m.Name)]; ok && strings.HasPrefix(m.Name, "musepi-cluster-") {
			out = ratiosTo(out, m, single, []figureLabel{
				{"cpu_us_per_attempt", "CPU per attempt"},
				{"requests_outage", "provider requests during the outage"},
				{"attempts_per_second", "retry attempts per wall-second"},
			})
		}
		for _, other := range []string{"floor", "peer"} {
			if o, ok := byName[other]; ok {
				out = ratiosTo(out, m, o, []figureLabel{
					{"cpu_us_per_attempt", "CPU per attempt"},
					{"bytes_per_waiting_session", "memory per waiting session"},
					{"peak_heap_mb", "peak heap"},
					{"peak_memory_mb", "peak heap + goroutine stacks"},
					{"lateness_p99_ms", "p99 wake-up lateness"},
					{"first_wave_lateness_p99_ms", "first-wave p99 lateness"},
				})
			}
		}
	}
	return out
}

// figureLabel is a figure's key and its label in a ratio.
type figureLabel struct{ key, label string }

// ratiosTo adds to out m's figures over o's, for the figures both have
// (o's above 0), labelled "LABEL, m / o".
func ratiosTo(out []Ratio, m, o System, figures []figureLabel) []Ratio {
	for _, f := range figures {
		a, okA := m.Figures[f.key]
		b, okB := o.Figures[f.key]
		if okA && okB && b > 0 {
			out = append(out, Ratio{Label: fmt.Sprintf("%s, %s / %s", f.label, m.Name, o.Name), Value: a / b})
		}
	}
	return out
}

// singleNodeOf is the single-node MusePi system a cluster system is
// compared with: "musepi-cluster-3" with "musepi", "musepi-cluster-3-budget-on"
// with "musepi-budget-on".
func singleNodeOf(cluster string) string {
	for _, suffix := range []string{"-budget-on", "-budget-off"} {
		if strings.HasSuffix(cluster, suffix) {
			return "musepi" + suffix
		}
	}
	return "musepi"
}

// notes explain what the figures mean in this run.
func notes(o *options) []string {
	n := []string{
		fmt.Sprintf("floor: protoactor-go alone, %d one-way messages per attempt between a bare actor pair per session; memory: the pair with one pending timer.", msgsPerAttempt),
		"peer: one goroutine per session, cenkalti/backoff/v5 with the same base delay, cap, jitter (75–100 % of nominal) and max retries; no credential switching.",
		"musepi: the runtime with defaults (model fallback off, no chains), sessions on two credentials, prompts sent with Session.PromptAsync.",
		"messages per attempt, counted during the run: the floor's messages received over its attempts; MusePi's protocol messages (Begins on its clock, less one per turn for the stream's goroutine) over its retry attempts: a plain attempt's 4, plus what prompts, credential selection and usage limits send.",
		"memory per waiting session: heap in use + goroutine stacks after two forced collections, less the same before setup, over the sessions that have sent their prompt; sampled at mid-outage, or with a ramp that goes past it once the last prompt is sent (at most 90 % into the outage). CPU time leaves out those two collections (the harness's, not the contender's).",
		"lockstep index: largest 10 ms bucket of a retry wave over the mean per bucket across that wave's jitter window (1.0 = spread, ~12 without jitter); hinted sessions (retry-after) are left out.",
	}
	if o.mode == "virtual" {
		n = append(n, "virtual mode: the virtual clock fires timers in 1 ms batches; lateness is not measured (timers fire exactly on virtual time).")
	} else {
		n = append(n, "real mode: lateness is from a timer's deadline to its callback; first wave = timers armed in the first 0.75 × base delay.")
		if o.provider == "fakellm" {
			n = append(n, "fakellm runs in a child process (its CPU is not counted); memory per waiting session includes the HTTP client's pooled connections.")
		} else {
			n = append(n, "in-process provider on the wall clock: no HTTP, the timers and actors alone.")
		}
	}
	if strings.Contains(o.contenders, "cluster") {
		n = append(n, fmt.Sprintf("musepi-cluster-%d: %d nodes in this process, each a protoactor cluster member with its gRPC remote on loopback, automanaged membership, and its own connection pool to one PostgreSQL database (histories, records, blocks); the session handles are spread round robin over the nodes but the last (whose leave would end its callers' prompts), so most prompts and events cross the remote; CPU is the whole process's (the nodes and the database client; PostgreSQL itself runs in its own processes, not counted); lateness is not measured (cluster mode runs on the wall clock it is given, unwrapped).", o.nodes, o.nodes))
		n = append(n, "node loss (2 nodes or more): at mid-outage the last node leaves (Shutdown: its sessions hand over and activate on the others); 'next request after the leave began' is, per session, the time from the leave to its first request sent by another node: the moved sessions against the others, whose backoffs run on undisturbed. A kill -9 of a node is shown by the multi-process test (cmd/musepi), not here.")
	}
	return n
}

// raiseFileLimit lifts the soft open-files limit to the hard one: a real
// run holds a connection per in-flight request.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// fakeServer is the fake LLM server child process of a real-mode run.
type fakeServer struct {
	cmd      *exec.Cmd
	lifeline io.WriteCloser // the child's stdin
	base     string
	client   *http.Client
	dir      string
}

// startFakeLLM starts this binary again as the fake server of sc and
// waits for its address.
func startFakeLLM(ctx context.Context, sc *Scenario) (*fakeServer, error) {
	dir, err := os.MkdirTemp("", "storm-fakellm")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "scenario.json")
	data, err := json.Marshal(sc.fakellm())
	if err == nil {
		err = os.WriteFile(file, data, 0o600)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("write fakellm scenario: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), serveEnv+"="+file)
	cmd.Stderr = os.Stderr
	// The child serves until its stdin closes: on stop, or when this
	// process dies however it dies.
	lifeline, err := cmd.StdinPipe()
	var out io.ReadCloser
	if err == nil {
		out, err = cmd.StdoutPipe()
	}
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start fakellm: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("fakellm did not report its address: %w", err)
	}
	tr := &http.Transport{MaxIdleConns: 2048, MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 2048, IdleConnTimeout: time.Minute}
	return &fakeServer{cmd: cmd, lifeline: lifeline, base: strings.TrimSpace(line), client: &http.Client{Transport: tr}, dir: dir}, nil
}

// newRun resets the server's clock (the outage window starts now) and
// gives a contender the OpenAI provider against it.
func (s *fakeServer) newRun() (clock.Clock, provider.Provider, *recorder, func(), error) {
	if err := s.resetClock(); err != nil {
		return nil, nil, nil, nil, err
	}
	rec := newRecorder(time.Now())
	p := openai.New(openai.Config{BaseURL: s.base + "/v1", API: openai.APIChat, HTTPClient: s.client})
	return clock.Real{}, &recordingProvider{Provider: p, rec: rec, resetClock: s.resetClock}, rec, s.client.CloseIdleConnections, nil
}

// resetClock starts the server's scenario (its outage window) now.
func (s *fakeServer) resetClock() error {
	resp, err := s.client.Post(s.base+"/clock/reset", "application/json", nil)
	if err != nil {
		return fmt.Errorf("reset fakellm clock: %w", err)
	}
	return resp.Body.Close()
}

// stop ends the child process.
func (s *fakeServer) stop() {
	_ = s.lifeline.Close()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}

// serveFakeLLM is the child process: it serves the scenario in file on a
// loopback port, prints the base URL, and stops on SIGINT or SIGTERM or
// when its stdin closes (its parent stopped it, or died).
func serveFakeLLM(file string) error {
	raiseFileLimit()
	sc, err := fakellm.LoadScenario(file)
	if err != nil {
		return err
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(base)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	return srv.Close()
}
