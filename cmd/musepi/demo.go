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
	"github.com/musepi/musepi/messages"
)

func init() {
	commands["demo"] = command{summary: "run a session that rides out injected provider failures (no API key needed)", run: runDemo}
}

// runDemo is "musepi demo" (also "musepi" with no arguments): a session
// that rides out injected provider failures, shown live. With --provider
// (and its API key in the environment) the same runs against a real API.
func runDemo(args []string) int {
	fs := flag.NewFlagSet("musepi demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setupFlags := addSetupFlags(fs)
	prompt := fs.String("prompt", "Say hello in one sentence.", "the prompt to send")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	su, err := setupFlags.open()
	if err != nil {
		fmt.Fprintf(stderr, "musepi demo: %v\n", err)
		return 1
	}
	defer shutdown(su)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	out := os.Stdout
	type run struct{ title, model, role string }
	runs := []run{{"", su.model, "default"}}
	if su.demo {
		fmt.Fprintln(out, "MusePi demo: sessions against a fault-injecting LLM server on loopback.")
		runs = []run{
			{"1. A 429 with retry-after: 2, then an overload, then the answer", "steady/steady", "solo"},
			{"2. Key A over its quota (credential switch), then model m1 overloaded (model fallback to m2)", "fake/m1", "default"},
		}
	}
	failed := false
	for _, r := range runs {
		if r.title != "" {
			fmt.Fprintf(out, "\n%s\n", r.title)
		}
		if err := demoSession(ctx, out, su.rt, *prompt, musepi.WithModel(r.model), musepi.WithRole(r.role)); err != nil {
			fmt.Fprintf(out, "  ✗ %v\n", err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

// demoSession runs one prompt and prints its events as they come.
func demoSession(ctx context.Context, out io.Writer, rt *musepi.Runtime, prompt string, opts ...musepi.SessionOption) error {
	s, err := rt.NewSession(ctx, opts...)
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	printed := make(chan struct{})
	var text strings.Builder
	unsubscribe := s.Subscribe(func(ev musepi.Event) {
		switch p := ev.Payload.(type) {
		case *messages.AgentStart:
			fmt.Fprintf(out, "  → calling %s\n", s.Model())
		case *messages.AgentEnd:
			if m := p.GetMessage(); m.GetStopReason() == messages.StopReason_STOP_REASON_ERROR {
				fmt.Fprintf(out, "  ✗ %s\n", firstLine(m.GetErrorMessage()))
			}
		case *messages.AutoRetryStart:
			fmt.Fprintf(out, "  ⟳ retry %d/%d in %.1fs (%s)\n", p.GetAttempt(), p.GetMaxAttempts(), float64(p.GetDelayMs())/1000, p.GetErrorClass())
		case *messages.AutoRetryEnd:
			if p.GetSuccess() {
				fmt.Fprintf(out, "  ✓ recovered after %d retries\n", p.GetAttempt())
			} else {
				fmt.Fprintf(out, "  Retry failed after %d attempts: %s\n", p.GetAttempt(), p.GetFinalError())
			}
		case *messages.RetryFallbackApplied:
			fmt.Fprintf(out, "  ⇄ model fallback %s → %s\n", p.GetFrom(), p.GetTo())
		case *messages.MessageUpdate:
			text.WriteString(p.GetDelta())
		case *messages.AgentSettled:
			close(printed)
		}
	})
	defer unsubscribe()
	msg, err := s.Prompt(ctx, prompt)
	select {
	case <-printed:
	case <-time.After(5 * time.Second):
	}
	if err != nil {
		return err
	}
	answer := text.String()
	if answer == "" {
		for _, b := range msg.GetContent() {
			answer += b.GetText().GetText()
		}
	}
	fmt.Fprintf(out, "  answer (%s): %s\n", s.Model(), answer)
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 160 {
		line = line[:160] + "…"
	}
	return line
}
