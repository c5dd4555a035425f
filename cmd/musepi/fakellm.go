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

// runFakeLLM is "musepi fakellm --listen ADDR [--scenario FILE]": it serves
// the fake LLM server until SIGINT or SIGTERM.
func runFakeLLM(args []string) int {
	fs := flag.NewFlagSet("musepi fakellm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8089", "address to listen on (host:port; port 0 picks a free one)")
	scenario := fs.String("scenario", "", "scenario JSON file (default: every call streams the default text)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: musepi fakellm [--listen 127.0.0.1:8089] [--scenario FILE]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Serves the OpenAI Chat Completions (/v1/chat/completions), OpenAI Responses")
		fmt.Fprintln(stderr, "(/v1/responses) and Anthropic Messages (/v1/messages) APIs with the faults the")
		fmt.Fprintln(stderr, "scenario describes; GET /stats shows the request counts. See")
		fmt.Fprintln(stderr, "provider/fakellm/README.md for the scenario format.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}

	var sc *fakellm.Scenario
	if *scenario != "" {
		var err error
		sc, err = fakellm.LoadScenario(*scenario)
		if err != nil {
			fmt.Fprintf(stderr, "musepi fakellm: %v\n", err)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv := fakellm.New(sc)
	base, err := srv.Start(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "musepi fakellm: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "fakellm listening on %s\n", base)
	<-ctx.Done()
	stop()
	fmt.Fprintln(stderr, "fakellm shutting down")
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "musepi fakellm: close: %v\n", err)
		return 1
	}
	return 0
}
