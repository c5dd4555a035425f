package main

import (
	"context"
	"errors"
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

var chatCommand = &command{
	summary:  "chat with a session in the terminal UI (retries shown live)",
	synopsis: []string{"[--config FILE | --provider NAME --model ID [--base-url URL]]"},
	about: `
Chats with one session in the terminal. Without --config or --provider it
runs against the built-in demo server (no API key needed). Keys: Enter sends,
Esc cancels a pending retry (else aborts the prompt), Ctrl-C quits.
Runtime logs would draw over the screen, so they are off unless -v is given
(then redirect stderr: 2>chat.log). Stdin and stdout must be a terminal:
without one the command says so in one line and exits with status 2 (for
a session over pipes, use musepi rpc).`,
	setup: setupChat,
}

// setupChat is "musepi chat": one session in the interactive terminal UI
// (see tui/README.md). Ctrl-C, SIGINT and SIGTERM quit cleanly with exit
// status 0.
func setupChat(fs *flag.FlagSet) func([]string) error {
	setupFlags := addSetupFlags(fs)
	return func([]string) error {
		if err := setupFlags.check(fs); err != nil {
			return err
		}
		if err := needTerminal(); err != nil {
			return err
		}
		return runChat(setupFlags)
	}
}

// needTerminal ends the command with status 2, before anything starts,
// unless stdin and stdout are a terminal: the UI would wait forever for
// keys on an open pipe, or fail on /dev/null after drawing its screen's
// escape codes. It says which is not, in one line on stderr.
func needTerminal() error {
	var not []string
	if !isTerminal(stdin) {
		not = append(not, "stdin")
	}
	if !isTerminal(stdout) {
		not = append(not, "stdout")
	}
	if len(not) == 0 {
		return nil
	}
	what := not[0] + " is not a terminal"
	if len(not) == 2 {
		what = "stdin and stdout are not terminals"
	}
	fmt.Fprintf(stderr, "musepi chat: %s: the chat needs one to read keys and draw on (for a session over pipes, use musepi rpc)\n", what)
	return exitCode(exitUsage)
}

func runChat(setupFlags *setupFlags) (err error) {
	var extra []musepi.Option
	if !setupFlags.verbose {
		extra = append(extra, musepi.WithLogger(slog.New(slog.DiscardHandler)))
	}
	su, err := setupFlags.open(extra...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, shutdown(su)) }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s, err := su.rt.NewSession(ctx, musepi.WithModel(su.model))
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	return tui.Run(ctx, s, stdin, stdout)
}
