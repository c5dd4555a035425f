// Command quickstart is the README's embedding example, whole: one runtime
// with two OpenAI keys, one session, one prompt, every error checked.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/openai"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt) // Ctrl-C cancels the prompt
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	rt, err := musepi.NewRuntime(
		musepi.WithProvider("openai", openai.New(openai.Config{BaseURL: os.Getenv("OPENAI_BASE_URL")}), // "": the public API
			musepi.Credential{Name: "main", APIKeyEnv: "OPENAI_API_KEY"},      // read now: unset or empty is an error
			musepi.Credential{Name: "backup", APIKeyEnv: "OPENAI_API_KEY_2"}), // one key? drop this line
		musepi.WithHistoryDir("musepi-sessions"), // one JSON-lines file per session
		musepi.WithLogger(slog.Default()),
	)
	if err != nil {
		return fmt.Errorf("start the runtime: %w", err)
	}
	defer func() {
		if err := rt.Shutdown(context.Background()); err != nil {
			log.Printf("shutdown: %v", err)
		}
	}()

	s, err := rt.NewSession(ctx, musepi.WithModel("openai/gpt-4o-mini"))
	if err != nil {
		return fmt.Errorf("open a session: %w", err)
	}
	// A retry counts once its call goes out (auto_retry_end's attempt may
	// name one never made); gaveUp gets the count when a chain gives up.
	made, gaveUp := 0, make(chan int, 1)
	s.Subscribe(func(e musepi.Event) { // called from a goroutine of its own, one event at a time
		switch ev := e.(type) {
		case musepi.AutoRetryStart: // retry n/max, announced: its call goes out after the delay
			log.Printf("retry %d/%d in %v (%s)", ev.Attempt, ev.MaxAttempts, ev.Delay, ev.ErrorClass)
		case musepi.AgentStart:
			if ev.User == nil { // a retry's call, not the prompt's
				made++
			}
		case musepi.AutoRetryEnd:
			if !ev.Success {
				gaveUp <- made
			}
			made = 0
		case musepi.CredentialSwitch:
			log.Printf("%s: key %s -> %s", ev.Provider, ev.From, ev.To)
		}
	})

	res, err := s.Prompt(ctx, "Say hello.") // returns once every retry is over
	var re *musepi.RetryError
	switch {
	case errors.As(err, &re): // the retry chain gave up: its auto_retry_end is on the way
		return fmt.Errorf("gave up (retries made: %d; %s, HTTP %d): %s", <-gaveUp, re.Class, re.Status, re.FinalError)
	case errors.Is(err, musepi.ErrAborted), errors.Is(err, context.Canceled):
		return errors.New("cancelled")
	case err != nil: // not retryable (a bad key, a context overflow, ...), or a limit
		return fmt.Errorf("prompt: %w", err)
	}
	fmt.Println(res.Text())
	if res.Usage != nil { // token counts, when the provider gave them
		fmt.Printf("(%s, %d tokens in, %d out)\n", res.StopReason, res.Usage.Input, res.Usage.Output)
	}
	return nil
}
