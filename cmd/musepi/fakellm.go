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
	synopsis: []string{"[--listen 127.0.0.1:8089] [--scenario FILE]"},
	about: `
Serves the OpenAI Chat Completions (/v1/chat/completions), OpenAI Responses
(/v1/responses) and Anthropic Messages (/v1/messages) APIs with the faults the
scenario describes; GET /stats shows the request counts. See
provider/fakellm/README.md for the scenario format. Serves until SIGINT or
SIGTERM.`,
	setup: setupFakeLLM,
}

// setupFakeLLM is "musepi fakellm --listen ADDR [--scenario FILE]".
func setupFakeLLM(fs *flag.FlagSet) func([]string) error {
	listen := fs.String("listen", "127.0.0.1:8089", "address to listen on (host:port; port 0 picks a free one)")
	scenario := fs.String("scenario", "", "scenario JSON file (default: every call streams the default text)")
	return func([]string) error { return runFakeLLM(*listen, *scenario) }
}

// runFakeLLM serves the fake LLM server until SIGINT or SIGTERM.
func runFakeLLM(listen, scenario string) error {
	var sc *fakellm.Scenario
	if scenario != "" {
		var err error
		if sc, err = fakellm.LoadScenario(scenario); err != nil {
			return err
		}
	}
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
