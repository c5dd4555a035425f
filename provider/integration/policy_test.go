package integration

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/retry"
)

// Behaviours of the retry policy that depend on what a real provider reads
// from the wire, end to end through sessions against fakellm.

// TestChatReasoningIsThinking (spec 2): reasoning streamed by an
// OpenAI-compatible chat server (reasoning_content, or OpenRouter's
// reasoning) streams as thinking deltas, is a thinking block of the
// message, is kept in history and the context, and is never sent
// back to the server.
func TestChatReasoningIsThinking(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"reasoning_content", "reasoning"} {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, &fakellm.Scenario{Default: &fakellm.Respond{
				Thinking: "The user greets me.", ReasoningField: field, Text: "Hello!", Chunks: 2}})
			p, wire := newProvider(t, openaiChat, srv.base, 10*time.Second)
			rt := newRuntime(t, musepi.WithProvider("fake", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
				musepi.WithRetrySettings(fastRetry()))
			s, events := newSession(t, rt, "fake/m1")

			msg, err := prompt(t, s, events, 1, "Hi")
			if err != nil {
				t.Fatal(err)
			}
			want := []musepi.Block{musepi.ThinkingBlock{Thinking: "The user greets me."}, musepi.TextBlock{Text: "Hello!"}}
			if blocks := msg.Content; !reflect.DeepEqual(blocks, want) {
				t.Fatalf("content %v; want thinking then text", blocks)
			}
			var thinking strings.Builder
			for _, e := range events.all() {
				if u, ok := e.(musepi.MessageUpdate); ok && u.Kind == "thinking" {
					thinking.WriteString(u.Delta)
				}
			}
			if thinking.String() != "The user greets me." {
				t.Errorf("thinking deltas %q", thinking.String())
			}

			if _, err := prompt(t, s, events, 2, "Again"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			for _, read := range []func(context.Context) ([]musepi.Entry, error){s.History, s.Messages} {
				entries, err := read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := entries[1].Assistant.Content[0].(musepi.ThinkingBlock).Thinking; got != "The user greets me." {
					t.Errorf("stored thinking %q", got)
				}
			}
			sent := wire.sent()
			if len(sent) != 2 {
				t.Fatalf("%d requests, want 2", len(sent))
			}
			raw, _ := json.Marshal(sent[1]["messages"])
			if strings.Contains(string(raw), "greets") || strings.Contains(string(raw), "reasoning") {
				t.Errorf("the second request sends the reasoning back: %s", raw)
			}
		})
	}
}

// TestUsageLimitEstimateFailsFast (spec 4): with one credential and no
// hint, a quota or usage-limit error takes the 30 min estimate (read from
// the provider's words, not from our "429 Too Many Requests" status line),
// which exceeds maxDelayMs: one call, no auto_retry_start, one failed end.
func TestUsageLimitEstimateFailsFast(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		for _, preset := range []string{"quota", "usage_limit"} {
			t.Run(k.name+"/"+preset, func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, &fakellm.Scenario{Default: &fakellm.Respond{Preset: preset}})
				p, _ := newProvider(t, k, srv.base, 10*time.Second)
				settings := retry.DefaultSettings() // maxDelayMs 300000
				rt := newRuntime(t, musepi.WithProvider("fake", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
					musepi.WithRetrySettings(settings))
				s, events := newSession(t, rt, "fake/m1")

				if _, err := prompt(t, s, events, 1, "Hi"); err == nil {
					t.Fatal("prompt succeeded")
				}
				lines := events.lines(retryEventTypes...)
				if len(lines) != 2 || !strings.HasPrefix(lines[0], `auto_retry_end success=false attempt=1 error="provider asked for 1800000 ms, more than retry.maxDelayMs (300000 ms): `) {
					t.Fatalf("events:\n  %s", strings.Join(lines, "\n  "))
				}
				if n := srv.Stats().Total; n != 1 {
					t.Errorf("%d LLM calls, want 1", n)
				}
			})
		}
	}
}

// TestStaleReplayRetriesOnSameModel (spec 3 step 8): a stale replay resets
// the provider's chain and retries at once on the same model, even with a
// fallback chain configured: no cooldown, no retry_fallback_applied.
func TestStaleReplayRetriesOnSameModel(t *testing.T) {
	t.Parallel()
	srv := startServer(t, &fakellm.Scenario{Rules: []fakellm.Rule{{
		Match: fakellm.Match{Model: "m1"}, Respond: fakellm.Respond{ForgetPrevious: true, Text: "Fresh."}}},
		Default: &fakellm.Respond{Text: "From the fallback."}})
	p, _ := newProvider(t, openaiResponses, srv.base, 10*time.Second)
	rt := newFallbackRuntime(t, p)
	s, events := newSession(t, rt, "fake/m1")
	for i := 1; i <= 2; i++ {
		if msg, err := prompt(t, s, events, i, "Question"); err != nil || msg.Text() != "Fresh." {
			t.Fatalf("prompt %d = %q, %v", i, msg.Text(), err)
		}
	}
	expectLines(t, events.lines(retryEventTypes...),
		"agent_settled success=true",
		"auto_retry_start 1/3 delay=0ms class=stale_replay",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true",
	)
	if st := srv.Stats(); st.ByModel["m2"] != 0 || s.Model() != "fake/m1" {
		t.Errorf("by_model %v, session model %s; want m1 only", st.ByModel, s.Model())
	}
}

// TestChatRefusalFallsBackAndPins (spec 2 and 3 step 8): a content_filter
// finish on chat completions, with an error text on the same chunk and
// thinking streamed before it, is a classifier refusal: the session falls
// back, the fallback is pinned, and the next prompt stays on it.
func TestChatRefusalFallsBackAndPins(t *testing.T) {
	t.Parallel()
	srv := startServer(t, &fakellm.Scenario{Rules: []fakellm.Rule{{
		Match: fakellm.Match{Model: "m1"},
		Respond: fakellm.Respond{Thinking: "Risky.", Refusal: "I can't help with that.",
			StopError: "Content blocked by the upstream safety filter"}}},
		Default: &fakellm.Respond{Text: "Answered by m2."}})
	p, _ := newProvider(t, openaiChat, srv.base, 10*time.Second)
	rt := newFallbackRuntime(t, p)
	s, events := newSession(t, rt, "fake/m1")

	msg, err := prompt(t, s, events, 1, "Something risky")
	if err != nil || msg.Text() != "Answered by m2." {
		t.Fatalf("prompt = %q, %v; events %v", msg.Text(), err, events.lines())
	}
	expectLines(t, events.lines(retryEventTypes...),
		"retry_fallback_applied fake/m1 -> fake/m2 (default)",
		"auto_retry_start 1/3 delay=0ms class=classifier_refusal",
		"retry_fallback_succeeded fake/m2 (default)",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true",
	)
	if _, err := prompt(t, s, events, 2, "And now?"); err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.ByModel["m1"] != 1 || st.ByModel["m2"] != 2 || s.Model() != "fake/m2" {
		t.Errorf("by_model %v, session model %s; want m1 once, then pinned on m2", st.ByModel, s.Model())
	}
}
