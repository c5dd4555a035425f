package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/musepi/musepi/provider/fakellm"
)

var fakeLLMCommand = &command{
	summary:  "run the fault-injecting fake LLM server",
	synopsis: []string{"[--listen 127.0.0.1:8089] [--scenario FILE] [--rpm N] [--tpm N]"},
	about: `
Serves the OpenAI Chat Completions (/v1/chat/completions), OpenAI Responses
(/v1/responses) and Anthropic Messages (/v1/messages) APIs with the faults the
scenario describes; GET /stats shows the request counts. --rpm and --tpm limit
every API key and model to that many requests and tokens per minute, with the
providers' rate-limit headers and 429s (after the scenario's own limits). See
provider/fakellm/README.md for the scenario format and the rate limits. Serves
until SIGINT or SIGTERM.`,
	setup: setupFakeLLM,
}

// setupFakeLLM is "musepi fakellm --listen ADDR [--scenario FILE] [--rpm N]
// [--tpm N]".
func setupFakeLLM(fs *flag.FlagSet) func([]string) error {
	listen := fs.String("listen", "127.0.0.1:8089", "address to listen on (host:port; port 0 picks a free one)")
	scenario := fs.String("scenario", "", "scenario JSON file (default: every call streams the default text)")
	rpm := fs.Int64("rpm", 0, "requests per minute allowed to each API key and model (0: no limit)")
	tpm := fs.Int64("tpm", 0, "tokens per minute allowed to each API key and model (0: no limit)")
	return func([]string) error {
		for _, f := range []struct {
			name string
			v    int64
		}{{"rpm", *rpm}, {"tpm", *tpm}} {
			if f.v < 0 || f.v > fakellm.MaxLimit {
				return usagef("--%s must be 0 (no limit) to %d, got %d", f.name, int64(fakellm.MaxLimit), f.v)
			}
		}
		sc, err := fakeLLMScenario(*scenario, fakellm.Limit{RPM: *rpm, TPM: *tpm})
		if err != nil {
			return err
		}
		return runFakeLLM(*listen, sc)
	}
}

// fakeLLMScenario is the scenario of file (nil without one) with the
// flags' limit for every key and model after its own limits, when the
// flags limit anything.
func fakeLLMScenario(file string, every fakellm.Limit) (*fakellm.Scenario, error) {
	var sc *fakellm.Scenario
	if file != "" {
		var err error
		if sc, err = fakellm.LoadScenario(file); err != nil {
			return nil, err // it names the file
		}
	}
	if every.RPM == 0 && every.TPM == 0 {
		return sc, nil
	}
	if sc == nil {
		sc = &fakellm.Scenario{}
	}
	for i, l := range sc.Limits {
		if l.Key == "" && l.Model == "" {
			return nil, fmt.Errorf("--rpm, --tpm: %s: limits[%d] already limits every key and model", file, i)
		}
	}
	sc.Limits = append(sc.Limits, every)
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("--rpm, --tpm: %w", err)
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
