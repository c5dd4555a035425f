package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/musepi/musepi"
)

func init() {
	commands["demo"] = command{summary: "watch a session ride out injected provider failures (no API key needed)", run: runDemo}
}

// stdout is where the demo prints; tests replace it.
var stdout io.Writer = os.Stdout

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

// demoUsage is "musepi demo -h".
func demoUsage(fs *flag.FlagSet) func() {
	return func() {
		w := fs.Output()
		fmt.Fprint(w, `usage: musepi demo [--scenario NAME|all] [--fast] [--prompt TEXT]
       musepi demo --provider NAME --model ID [--base-url URL]

Runs a session against a fault-injecting LLM server that the command starts on
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
			fmt.Fprintf(w, "\n  %s%s\n", sc.name, def)
			for line := range strings.SplitSeq(sc.about, "\n") {
				fmt.Fprintf(w, "      %s\n", line)
			}
		}
		fmt.Fprint(w, `
Examples:
  musepi demo                      # the tour
  musepi demo --scenario outage    # one scenario
  musepi demo --scenario all       # every scenario, about 16 s
  musepi demo --fast               # the same with time scaled down 1000x (tests)
  OPENAI_API_KEY=... musepi demo --provider openai --model gpt-4o-mini
                                   # one prompt against the real API

Flags:
`)
		fs.PrintDefaults()
	}
}

// runDemo is "musepi demo": sessions that ride out injected provider
// failures, shown live. With --provider (and its API key in the
// environment) one prompt runs against a real API instead.
func runDemo(args []string) int {
	fs := flag.NewFlagSet("musepi demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setupFlags := addSetupFlags(fs)
	prompt := fs.String("prompt", "Say hello in one sentence.", "the prompt to send")
	scenario := fs.String("scenario", demoScenarios[0].name, `the demo scenario to run, or "all" (see above)`)
	fs.BoolVar(&setupFlags.fast, "fast", false, "scale the demo server's time down 1000x: every backoff and hint a thousandth (for tests)")
	fs.Usage = demoUsage(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	runs, err := pickScenarios(*scenario)
	if err != nil {
		fmt.Fprintf(stderr, "musepi demo: %v\n", err)
		return 2
	}
	su, err := setupFlags.open()
	if err != nil {
		fmt.Fprintf(stderr, "musepi demo: %v\n", err)
		return 1
	}
	defer shutdown(su)
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
	code := 0
	for _, r := range runs {
		if r.title != "" {
			p.line("")
			p.line("▶ %s: %s", r.name, r.title)
		}
		err := demoSession(ctx, p, su.rt, *prompt, musepi.WithModel(r.model), musepi.WithRole(r.role))
		switch {
		case ctx.Err() != nil:
			p.interrupted()
			return 130
		case err != nil && r.fails:
			p.line("  (as this scenario intends: the policy gave up rather than sleep)")
		case err != nil:
			code = 1
		case r.fails:
			p.line("  ✗ this scenario should have given up, and it answered")
			code = 1
		}
	}
	return code
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
	return nil, fmt.Errorf("--scenario %q: want %s or all", name, strings.Join(names, ", "))
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
	run := p.begin(s.Model(), settled)
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

// isTerminal reports whether w is a terminal, where the countdown is
// redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 160 {
		line = line[:160] + "…"
	}
	return line
}
