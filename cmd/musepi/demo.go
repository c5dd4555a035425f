package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/charmbracelet/x/term"

	"github.com/musepi/musepi"
)

var demoCommand = &command{
	summary: "watch a session ride out injected provider failures (no API key needed)",
	synopsis: []string{
		"[--scenario NAME|all] [--fast] [--prompt TEXT]",
		"(--config FILE | --provider NAME --model ID [--base-url URL]) [--prompt TEXT]",
	},
	about: demoAbout(),
	setup: setupDemo,
}

// demoScenario is one scripted story of the built-in demo server
// (demo_scenario.json holds the fake server's side of it).
type demoScenario struct {
	name  string
	title string // printed before the scenario runs
	about string // what it shows, for -h
	model string // the session's model (provider/model)
	role  string // the session's role: its fallback chain
	fails bool   // the prompt is meant to fail (the scenario shows a give-up)
}

// demoScenarios are the demo's scenarios, in the order "--scenario all"
// runs them; the first is the default.
var demoScenarios = []demoScenario{
	{
		name:  "tour",
		title: "One prompt, four failures: a key over its quota, an overloaded model, a 429 asking for 3 s, a 503",
		about: "key A is over its quota (switch to key B at once), model m1 is overloaded\n" +
			"(fallback to m2 at once), m2 answers a 429 with retry-after: 3 (a 3 s\n" +
			"backoff, counted down) and then a 503 (an exponential backoff of 3-4 s),\n" +
			"then the answer. About 7 s.",
		model: "tour/m1", role: "default",
	},
	{
		name:  "outage",
		title: "A provider outage: four 503s in a row, each backoff twice the last",
		about: "four 503s: backoffs of about 0.5, 1, 2 and 4 s (jittered to 75-100 %),\n" +
			"then the answer. About 7 s.",
		model: "outage/m1", role: "outage",
	},
	{
		name:  "give-up",
		title: "A provider asking for 10 minutes: more than retry.maxDelayMs, so no sleep",
		about: "a 429 with retry-after: 600, more than the 5 minute retry.maxDelayMs:\n" +
			"the chain ends at once with a clear error instead of sleeping.",
		model: "give-up/m1", role: "give-up", fails: true,
	},
}

// demoAbout is what "musepi demo -h" says between the synopsis and the
// flags: what the demo shows, its scenarios and examples.
func demoAbout() string {
	var b strings.Builder
	b.WriteString(`Runs a session against a fault-injecting LLM server that the command starts on
loopback (no API key needed) and prints what the retry policy does, live: each
call, each failure, each retry with its backoff counted down, credential
switches, model fallbacks, the answer, and a summary. Ctrl-C stops at once.

Scenarios (--scenario NAME; "all" runs them one after the other):
`)
	for _, sc := range demoScenarios {
		def := ""
		if sc.name == demoScenarios[0].name {
			def = " (default)"
		}
		fmt.Fprintf(&b, "\n  %s%s\n", sc.name, def)
		for line := range strings.SplitSeq(sc.about, "\n") {
			fmt.Fprintf(&b, "      %s\n", line)
		}
	}
	b.WriteString(`
Examples:
  musepi demo                      # the tour
  musepi demo --scenario outage    # one scenario
  musepi demo --scenario all       # every scenario, about 16 s
  musepi demo --fast               # the same with time scaled down 1000x (tests)
  OPENAI_API_KEY=... musepi demo --provider openai --model gpt-4o-mini
                                   # one prompt against the real API`)
	return b.String()
}

// setupDemo is "musepi demo": sessions that ride out injected provider
// failures, shown live. With --provider (and its API key in the
// environment) one prompt runs against a real API instead.
func setupDemo(fs *flag.FlagSet) func([]string) error {
	setupFlags := addSetupFlags(fs)
	prompt := fs.String("prompt", "Say hello in one sentence.", "the prompt to send")
	scenario := fs.String("scenario", demoScenarios[0].name, `the demo scenario to run, or "all" (see above)`)
	fs.BoolVar(&setupFlags.fast, "fast", false, "scale the demo server's time down 1000x: every backoff and hint a thousandth (for tests)")
	return func([]string) error {
		set := given(fs)
		if err := cmp.Or(setupFlags.check(fs),
			set.excludes("scenario", "config", "provider"), set.excludes("fast", "config", "provider")); err != nil {
			return err
		}
		runs, err := pickScenarios(*scenario)
		if err != nil {
			return err
		}
		return runDemo(setupFlags, runs, *prompt)
	}
}

// runDemo runs the scenarios, or with --config or --provider the prompt on
// the configured model.
func runDemo(setupFlags *setupFlags, runs []demoScenario, prompt string) (err error) {
	su, err := setupFlags.open()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, shutdown(su)) }()
	if !su.demo {
		runs = []demoScenario{{model: su.model, role: "default"}}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	p := newDemoPrinter(stdout, isTerminal(stdout))
	defer p.close()
	if su.demo {
		p.line("MusePi demo: a session against a fault-injecting LLM server on loopback.")
	}
	var failed error
	for _, r := range runs {
		if r.title != "" {
			p.line("")
			p.line("▶ %s: %s", r.name, r.title)
		}
		err := demoSession(ctx, p, su.rt, prompt, musepi.WithModel(r.model), musepi.WithRole(r.role))
		switch {
		case ctx.Err() != nil:
			p.interrupted()
			return exitCode(130)
		case err != nil && r.fails:
			p.line("  (as this scenario intends: the policy gave up rather than sleep)")
		case err != nil:
			failed = exitCode(exitFailure)
		case r.fails:
			p.line("  ✗ this scenario should have given up, and it answered")
			failed = exitCode(exitFailure)
		}
	}
	return failed
}

// pickScenarios returns the scenarios --scenario names.
func pickScenarios(name string) ([]demoScenario, error) {
	if name == "all" {
		return demoScenarios, nil
	}
	names := make([]string, 0, len(demoScenarios))
	for _, sc := range demoScenarios {
		if sc.name == name {
			return []demoScenario{sc}, nil
		}
		names = append(names, sc.name)
	}
	return nil, usagef("--scenario %q: want %s or all", name, strings.Join(names, ", "))
}

// demoSession runs one prompt on a new session and prints its events as
// they come, then its outcome. The error is the prompt's.
func demoSession(ctx context.Context, p *demoPrinter, rt *musepi.Runtime, prompt string, opts ...musepi.SessionOption) error {
	s, err := rt.NewSession(ctx, opts...)
	if err != nil {
		if ctx.Err() == nil { // after Ctrl-C the summary says it
			p.line("  ✗ %v", err)
		}
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	settled := make(chan struct{})
	run := p.begin(ctx, s.Model(), settled)
	unsubscribe := s.Subscribe(run.event)
	defer unsubscribe()
	msg, err := s.Prompt(ctx, prompt)
	if ctx.Err() != nil {
		run.stop() // printing ends here; the summary follows
		return ctx.Err()
	}
	select {
	case <-settled: // every event of the prompt is printed
	case <-time.After(5 * time.Second):
	}
	run.finish(msg, err)
	return err
}

// isTerminal reports whether stream (stdin, stdout or stderr) is a
// terminal: an *os.File on one, not a pipe, a file or /dev/null (which a
// character-device test takes for one).
func isTerminal(stream any) bool {
	f, ok := stream.(*os.File)
	return ok && term.IsTerminal(f.Fd())
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 160 {
		line = line[:160] + "…"
	}
	return line
}
