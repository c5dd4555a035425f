package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/tui"
)

func init() {
	commands["chat"] = command{summary: "chat with a session in the terminal UI (retries shown live)", run: runChat}
}

// runChat is "musepi chat": one session in the interactive terminal UI (see
// tui/README.md). Ctrl-C, SIGINT and SIGTERM quit cleanly with exit code 0.
func runChat(args []string) int {
	fs := flag.NewFlagSet("musepi chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setupFlags := addSetupFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: musepi chat [--config FILE | --provider NAME --model ID [--base-url URL]]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Chats with one session in the terminal. Without --config or --provider it")
		fmt.Fprintln(stderr, "runs against the built-in demo server (no API key needed). Keys: Enter sends,")
		fmt.Fprintln(stderr, "Esc cancels a pending retry (else aborts the prompt), Ctrl-C quits.")
		fmt.Fprintln(stderr, "Runtime logs would draw over the screen, so they are off unless -v is given")
		fmt.Fprintln(stderr, "(then redirect stderr: 2>chat.log).")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	var extra []musepi.Option
	if !setupFlags.verbose {
		extra = append(extra, musepi.WithLogger(slog.New(slog.DiscardHandler)))
	}
	su, err := setupFlags.open(extra...)
	if err != nil {
		fmt.Fprintf(stderr, "musepi chat: %v\n", err)
		return 1
	}
	defer shutdown(su)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s, err := su.rt.NewSession(ctx, musepi.WithModel(su.model))
	if err != nil {
		fmt.Fprintf(stderr, "musepi chat: %v\n", err)
		return 1
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	if err := tui.Run(ctx, s, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(stderr, "musepi chat: %v\n", err)
		return 1
	}
	return 0
}
