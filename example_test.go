package musepi_test

import (
	"context"
	"fmt"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/clock"
	"github.com/musepi/musepi/messages"
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
		switch p := ev.Payload.(type) {
		case *messages.AutoRetryStart:
			fmt.Printf("retrying (%d/%d): %s\n", p.GetAttempt(), p.GetMaxAttempts(), p.GetErrorMessage())
		case *messages.AutoRetryEnd:
			fmt.Printf("retry over, success=%t\n", p.GetSuccess())
		case *messages.AgentSettled:
			close(settled)
		}
	})
	msg, err := s.Prompt(ctx, "Say hello")
	if err != nil {
		panic(err)
	}
	<-settled
	fmt.Println(msg.GetContent()[0].GetText().GetText())
	// Output:
	// retrying (1/10): 503 Service Unavailable
	// retry over, success=true
	// Hello!
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
	done := make(chan *messages.AssistantMessage)
	go func() {
		msg, _ := s.Prompt(ctx, "hi")
		done <- msg
	}()
	for s.Generation() == 0 { // wait until the session took the prompt
		time.Sleep(time.Millisecond)
	}
	_ = clk.RunUntilIdle(ctx)
	msg := <-done
	fmt.Println(msg.GetContent()[0].GetText().GetText(), "after", clk.Now().Sub(start).Round(time.Second))
	// Output: done after 1m0s
}
