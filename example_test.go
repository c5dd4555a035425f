package musepi_test

import (
	"context"
	"fmt"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// Embedding MusePi: a session whose provider fails once with a 503 and then
// answers. Prompt returns the answer once the retry chain is over; the
// events show the retry.
func Example() {
	llm := provider.NewScripted(
		provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)},
		provider.Outcome{Message: provider.Text("Hello!")},
	)
	settings := retry.DefaultSettings()
	settings.BaseDelay = 10 * time.Millisecond
	rt, err := musepi.NewRuntime(musepi.WithProvider("demo", llm), musepi.WithRetrySettings(settings))
	if err != nil {
		panic(err)
	}
	defer rt.Shutdown(context.Background())

	ctx := context.Background()
	s, err := rt.NewSession(ctx, musepi.WithModel("demo/model-1"))
	if err != nil {
		panic(err)
	}
	settled := make(chan struct{})
	s.Subscribe(func(ev musepi.Event) {
		switch ev := ev.(type) {
		case musepi.AutoRetryStart:
			fmt.Printf("retrying (%d/%d) in %v: %s\n", ev.Attempt, ev.MaxAttempts, ev.Delay.Round(10*time.Millisecond), ev.ErrorMessage)
		case musepi.AutoRetryEnd:
			fmt.Printf("retry over, success=%t\n", ev.Success)
		case musepi.AgentSettled:
			close(settled)
		}
	})
	msg, err := s.Prompt(ctx, "Say hello")
	if err != nil {
		panic(err)
	}
	<-settled
	fmt.Println(msg.Text(), msg.StopReason)
	// Output:
	// retrying (1/10) in 10ms: 503 Service Unavailable
	// retry over, success=true
	// Hello! stop
}

// On a virtual clock the whole runtime runs in virtual time: a one-minute
// rate-limit hint passes without waiting.
func ExampleWithClock() {
	clk := clock.NewVirtual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	llm := provider.NewScripted(
		provider.Outcome{Message: provider.Failure(429, "429 Too Many Requests", map[string]string{"retry-after": "60"})},
		provider.Outcome{Message: provider.Text("done")},
	)
	rt, _ := musepi.NewRuntime(musepi.WithClock(clk), musepi.WithProvider("demo", llm))
	defer rt.Shutdown(context.Background())
	ctx := context.Background()
	s, _ := rt.NewSession(ctx, musepi.WithModel("demo/m"))

	start := clk.Now()
	done := make(chan *musepi.AssistantMessage)
	go func() {
		msg, _ := s.Prompt(ctx, "hi")
		done <- msg
	}()
	for s.Generation() == 0 { // wait until the session took the prompt
		time.Sleep(time.Millisecond)
	}
	_ = clk.RunUntilIdle(ctx)
	msg := <-done
	fmt.Println(msg.Text(), "after", clk.Now().Sub(start).Round(time.Second))
	// Output: done after 1m0s
}
