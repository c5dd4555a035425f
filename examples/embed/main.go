// Command embed is the smallest useful embedding of MusePi: one runtime,
// one session, one prompt. The LLM (a fake server on loopback) fails the
// first call with a 503; the session retries on its own and Prompt returns
// the answer once the retry chain is over.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
)

func main() {
	// A stand-in for an OpenAI-compatible API: the first call is a 503.
	llm := fakellm.New(&fakellm.Scenario{
		Rules:   []fakellm.Rule{{Match: fakellm.Match{First: 1}, Respond: fakellm.Respond{Preset: "unavailable"}}},
		Default: &fakellm.Respond{Text: "Hello from the fake model."},
	})
	base, err := llm.Start("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer llm.Close()

	rt, err := musepi.NewRuntime(musepi.WithProvider("openai",
		openai.New(openai.Config{BaseURL: base + "/v1"}),
		musepi.Credential{Name: "main", APIKey: "sk-example"}))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := rt.NewSession(ctx, musepi.WithModel("openai/gpt-4o-mini"))
	if err != nil {
		log.Fatal(err)
	}
	settled := make(chan struct{})
	made := 0                          // retries made: a retry counts once its call goes out
	s.Subscribe(func(e musepi.Event) { // called from a goroutine of its own, one event at a time
		switch ev := e.(type) {
		case musepi.AutoRetryStart:
			fmt.Printf("retry %d/%d (%s) in %v: %s\n", ev.Attempt, ev.MaxAttempts, ev.ErrorClass, ev.Delay.Round(time.Millisecond), ev.ErrorMessage)
		case musepi.AgentStart:
			if ev.User == nil { // a retry's call, not the prompt's
				made++
			}
		case musepi.AutoRetryEnd: // its attempt may name a retry never made (cancelled, refused)
			fmt.Printf("retry chain over: success=%t, retries made: %d\n", ev.Success, made)
			made = 0
		case musepi.AgentSettled: // the prompt's last event
			close(settled)
		}
	})

	res, err := s.Prompt(ctx, "Say hello.")
	if err != nil {
		log.Fatal(err)
	}
	<-settled // the events above are printed
	fmt.Printf("answer: %s\n", res.Text())
	fmt.Printf("stop reason: %s, model: %s/%s\n", res.StopReason, res.Provider, res.Model)
	if res.Usage != nil {
		fmt.Printf("tokens: %d in, %d out\n", res.Usage.Input, res.Usage.Output)
	}
}
