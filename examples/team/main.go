// Command team runs a multi-agent fan-out: several sessions, one per role
// of a small team, share one runtime and its credentials. The first API
// key runs into its usage limit mid-way; the sessions move to the second
// key on their own (credential_switch) while the rest of the team carries
// on. A runtime-wide subscription watches every session, and Stats shows
// the runtime as a whole at the end.
package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
)

// roles are the team: each gets a session of its own.
var roles = []string{"planner", "researcher", "critic", "writer", "reviewer"}

func main() {
	// Key A is over its usage limit; key B works.
	llm := fakellm.New(&fakellm.Scenario{
		Rules: []fakellm.Rule{{Name: "key A exhausted", Match: fakellm.Match{Key: "sk-team-a"},
			Respond: fakellm.Respond{Preset: "usage_limit"}}},
		Default: &fakellm.Respond{Text: "done", ChunkDelayMs: 5},
	})
	base, err := llm.Start("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer llm.Close()

	rt, err := musepi.NewRuntime(musepi.WithProvider("openai", openai.New(openai.Config{BaseURL: base + "/v1"}),
		musepi.Credential{Name: "key A", APIKey: "sk-team-a"},
		musepi.Credential{Name: "key B", APIKey: "sk-team-b"}))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Shutdown(context.Background())

	// One subscription for the whole team.
	var mu sync.Mutex
	switches := map[string]string{}
	unsubscribe := rt.Subscribe(func(e musepi.Event) {
		if ev, ok := e.(musepi.CredentialSwitch); ok {
			mu.Lock()
			switches[ev.SessionID] = fmt.Sprintf("%s -> %s (%s)", ev.From, ev.To, ev.Reason)
			mu.Unlock()
		}
	})
	defer unsubscribe()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	answers := make([]string, len(roles))
	for i, role := range roles {
		s, err := rt.NewSession(ctx, musepi.WithModel("openai/team-model"), musepi.WithSessionID(role))
		if err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		// PromptAsync holds no goroutine while the prompt runs.
		s.PromptAsync(ctx, "Do your part as the "+role+".", func(res *musepi.AssistantMessage, err error) {
			defer wg.Done()
			if err != nil {
				answers[i] = "failed: " + err.Error()
				return
			}
			answers[i] = res.Text()
		})
	}
	wg.Wait()

	for i, role := range roles {
		fmt.Printf("%-10s %s\n", role+":", answers[i])
	}
	mu.Lock()
	var moved []string
	for id, sw := range switches {
		moved = append(moved, id+" "+sw)
	}
	mu.Unlock()
	sort.Strings(moved)
	fmt.Printf("credential switches: %d\n", len(moved))
	for _, m := range moved {
		fmt.Println("  " + m)
	}
	st := rt.Stats()
	fmt.Printf("stats: %d sessions, %d busy, %d retrying, credentials blocked %v\n",
		st.Sessions, st.Busy, st.Retrying, st.CredentialsBlocked)
	if len(moved) == 0 || strings.Contains(strings.Join(answers, ""), "failed") {
		log.Fatal("the team did not ride out the usage limit")
	}
}
