package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/musepi/musepi/config"
	"github.com/musepi/musepi/provider/fakellm"
)

var fakeLLMCommand = &command{
	summary:  "run the fault-injecting fake LLM server",
	synopsis: []string{"[--listen 127.0.0.1:8089] [--scenario FILE] [--rpm N] [--tpm N] [--itpm N] [--otpm N] [--window DURATION]"},
	about: `
Serves the OpenAI Chat Completions (/v1/chat/completions), OpenAI Responses
(/v1/responses) and Anthropic Messages (/v1/messages) APIs with the faults the
scenario describes; GET /stats shows the request counts. --rpm, --tpm, --itpm
and --otpm limit every API key and model to that many requests, tokens, input
tokens and output tokens per minute, with the providers' rate-limit headers and
429s (after the scenario's own limits). OpenAI counts tokens against --tpm;
Anthropic counts input against --itpm and output against --otpm, and --tpm is
for it a limit of both together. --window enforces every per-minute limit
(the scenario's too, unless one sets its own) over windows that short, as both
providers say they may: with --rpm 600 --window 1s, 10 requests at once pass
and the 11th gets a 429 while the headers still report the minute. See
provider/fakellm/README.md for the scenario format and the rate limits. Serves
until SIGINT or SIGTERM.`,
	setup: setupFakeLLM,
}

// setupFakeLLM is "musepi fakellm --listen ADDR [--scenario FILE] [--rpm
// N] [--tpm N] [--itpm N] [--otpm N] [--window DURATION]".
func setupFakeLLM(fs *flag.FlagSet) func([]string) error {
	listen := checkedString(fs, "listen", "127.0.0.1:8089", "`address` to listen on (host:port; port 0 picks a free one)", config.CheckListenAddress)
	scenario := fs.String("scenario", "", "scenario JSON file (default: every call streams the default text)")
	rpm := fs.Int64("rpm", 0, "requests per minute allowed to each API key and model (0: no limit)")
	tpm := fs.Int64("tpm", 0, "tokens per minute allowed to each API key and model: OpenAI's TPM, Anthropic's input and output together (0: no limit)")
	itpm := fs.Int64("itpm", 0, "input tokens per minute allowed to each API key and model, Anthropic's ITPM (0: no limit)")
	otpm := fs.Int64("otpm", 0, "output tokens per minute allowed to each API key and model, Anthropic's OTPM (0: no limit)")
	window := fs.Duration("window", 0, "enforce every per-minute limit L over windows this long (1ms to 1m): at most L·window/1m at once (0: the minute)")
	return func([]string) error {
		every := fakellm.Limit{RPM: *rpm, TPM: *tpm, ITPM: *itpm, OTPM: *otpm}
		if err := checkLimitFlags(&every, *window); err != nil {
			return err
		}
		if every.WindowMs > 0 && !limitsAny(every) && *scenario == "" {
			return usagef("--window needs a limit: --rpm, --tpm, --itpm, --otpm or a --scenario with limits")
		}
		sc, err := fakeLLMScenario(*scenario, every)
		if err != nil {
			return err
		}
		return runFakeLLM(*listen, sc)
	}
}

// checkLimitFlags checks the limit flags' ranges and sets every's window
// from window.
func checkLimitFlags(every *fakellm.Limit, window time.Duration) error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"rpm", every.RPM}, {"tpm", every.TPM}, {"itpm", every.ITPM}, {"otpm", every.OTPM}} {
		if f.v < 0 || f.v > fakellm.MaxLimit {
			return usagef("--%s must be 0 (no limit) to %d, got %d", f.name, int64(fakellm.MaxLimit), f.v)
		}
	}
	if window < 0 || window > fakellm.MaxWindowMs*time.Millisecond || window%time.Millisecond != 0 {
		return usagef("--window must be 0 (the minute) or whole milliseconds up to 1m, got %v", window)
	}
	every.WindowMs = window.Milliseconds()
	return nil
}

// limitsAny reports whether l limits anything.
func limitsAny(l fakellm.Limit) bool { return l.RPM > 0 || l.TPM > 0 || l.ITPM > 0 || l.OTPM > 0 }

// fakeLLMScenario is the scenario of file (nil without one) with every's
// window on each of its limits that sets none, and the flags' limit for
// every key and model after its own limits, when the flags limit
// anything.
func fakeLLMScenario(file string, every fakellm.Limit) (*fakellm.Scenario, error) {
	var sc *fakellm.Scenario
	if file != "" {
		var err error
		if sc, err = fakellm.LoadScenario(file); err != nil {
			return nil, err // it names the file
		}
		for i := range sc.Limits {
			if sc.Limits[i].WindowMs == 0 {
				sc.Limits[i].WindowMs = every.WindowMs
			}
		}
	}
	if !limitsAny(every) {
		return sc, nil
	}
	if sc == nil {
		sc = &fakellm.Scenario{}
	}
	const flags = "--rpm, --tpm, --itpm, --otpm"
	for i, l := range sc.Limits {
		if l.Key == "" && l.Model == "" {
			return nil, fmt.Errorf("%s: %s: limits[%d] already limits every key and model", flags, file, i)
		}
	}
	sc.Limits = append(sc.Limits, every)
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", flags, err)
	}
	return sc, nil
}

// runFakeLLM serves sc until SIGINT or SIGTERM.
func runFakeLLM(listen string, sc *fakellm.Scenario) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv := fakellm.New(sc)
	base, err := srv.Start(listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	fmt.Fprintf(stderr, "fakellm listening on %s\n", base)
	<-ctx.Done()
	stop()
	fmt.Fprintln(stderr, "fakellm shutting down")
	if err := srv.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}
