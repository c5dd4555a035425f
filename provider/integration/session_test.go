package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
)

// TestResponsesStaleReplayRecoversAfterResetSession: the second prompt of a
// Responses session chains to a previous_response_id the server has
// forgotten; the session resets the provider's chain and retries at once,
// without previous_response_id, and the prompt succeeds.
func TestResponsesStaleReplayRecoversAfterResetSession(t *testing.T) {
	t.Parallel()
	srv := startServer(t, &fakellm.Scenario{
		Rules: []fakellm.Rule{{
			Name:    "forgetful",
			Match:   fakellm.Match{API: fakellm.APIOpenAIResponses},
			Respond: fakellm.Respond{ForgetPrevious: true, Text: "Answer from a fresh context.", Chunks: 2},
		}},
	})
	p, rec := newProvider(t, openaiResponses, srv.base, 10*time.Second)
	rt := newRuntime(t,
		musepi.WithProvider("oai", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
		musepi.WithRetrySettings(fastRetry()))
	s, events := newSession(t, rt, "oai/gpt-test")

	msg, err := prompt(t, s, events, 1, "First question")
	if err != nil || msg.Text() != "Answer from a fresh context." {
		t.Fatalf("first prompt = %q, %v", msg.Text(), err)
	}
	if n := len(events.starts()); n != 0 {
		t.Fatalf("first prompt retried %d times: %v", n, events.lines(retryEventTypes...))
	}

	msg, err = prompt(t, s, events, 2, "Second question")
	if err != nil || msg.Text() != "Answer from a fresh context." {
		t.Fatalf("second prompt = %q, %v; events %v", msg.Text(), err, events.lines())
	}
	expectLines(t, events.lines(retryEventTypes...),
		"agent_settled success=true",
		"auto_retry_start 1/3 delay=0ms class=stale_replay",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true",
	)
	if start := events.starts()[0]; !strings.Contains(start.ErrorMessage, "previous_response_not_found") {
		t.Errorf("auto_retry_start error %q does not quote the stale-replay error", start.ErrorMessage)
	}

	// The wire: call 2 chained to call 1's response; the retry (call 3)
	// sent the whole context without previous_response_id.
	sent := rec.sent()
	if len(sent) != 3 {
		t.Fatalf("provider sent %d requests, want 3", len(sent))
	}
	prev := func(i int) string { s, _ := sent[i]["previous_response_id"].(string); return s }
	inputs := func(i int) int { in, _ := sent[i]["input"].([]any); return len(in) }
	if prev(0) != "" || inputs(0) != 1 {
		t.Errorf("call 1: previous_response_id %q, %d input items; want none, 1", prev(0), inputs(0))
	}
	if !strings.HasPrefix(prev(1), "resp_") || inputs(1) != 1 {
		t.Errorf("call 2: previous_response_id %q, %d input items; want resp_..., 1 (only the new user message)", prev(1), inputs(1))
	}
	if prev(2) != "" || inputs(2) != 3 {
		t.Errorf("retried call: previous_response_id %q, %d input items; want none, 3 (user, assistant, user)", prev(2), inputs(2))
	}
	st := srv.Stats()
	if st.Total != 3 || st.ByStatus["200"] != 2 || st.ByStatus["400"] != 1 {
		t.Errorf("fakellm stats total %d by_status %v; want 3, {200:2, 400:1}", st.Total, st.ByStatus)
	}

	// The stale error stays in the persisted history, not in the context.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	hist, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(hist); strings.Join(got, "\n") != strings.Join([]string{
		"user First question",
		`assistant ok "Answer from a fresh context."`,
		"user Second question",
		"assistant error",
		`assistant ok "Answer from a fresh context."`,
	}, "\n") {
		t.Errorf("history:\n  %s", strings.Join(got, "\n  "))
	}
	inContext, err := s.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(inContext); n != 4 {
		t.Errorf("context holds %d entries, want 4 (the stale error stripped): %v", n, describe(inContext))
	}
}

// describe renders entries as short lines.
func describe(entries []musepi.Entry) []string {
	var out []string
	for _, e := range entries {
		switch {
		case e.User != nil:
			out = append(out, "user "+e.User.Text)
		case e.Assistant != nil:
			a := e.Assistant
			if a.StopReason == musepi.StopReasonError {
				out = append(out, "assistant error")
			} else {
				out = append(out, fmt.Sprintf("assistant ok %q", a.Text()))
			}
		case e.ModelChange != nil:
			m := e.ModelChange
			out = append(out, fmt.Sprintf("model_change %s -> %s (%s)", m.From, m.To, m.Reason))
		default:
			out = append(out, "other")
		}
	}
	return out
}

// TestCredentialSwitchKeyAToKeyB: key-a hits a usage limit, the session
// switches to key-b at once (delay 0) and the prompt succeeds.
func TestCredentialSwitchKeyAToKeyB(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		for _, preset := range []string{"usage_limit", "quota"} {
			t.Run(k.name+"/"+preset, func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, &fakellm.Scenario{
					Rules: []fakellm.Rule{{
						Name:    "key-a-limited",
						Match:   fakellm.Match{Key: "key-a"},
						Respond: fakellm.Respond{Preset: preset},
					}},
					Default: &fakellm.Respond{Text: "Answered with key-b."},
				})
				p, _ := newProvider(t, k, srv.base, 10*time.Second)
				settings := fastRetry()
				settings.ModelFallback = true // a credential switch is preferred over a model fallback
				rt := newRuntime(t,
					musepi.WithProvider("llm", p,
						musepi.Credential{Name: "a", APIKey: "key-a"},
						musepi.Credential{Name: "b", APIKey: "key-b"}),
					musepi.WithRetrySettings(settings))
				s, events := newSession(t, rt, "llm/model-x")

				msg, err := prompt(t, s, events, 1, "Hello")
				if err != nil || msg.Text() != "Answered with key-b." {
					t.Fatalf("prompt = %q, %v; events %v", msg.Text(), err, events.lines())
				}
				expectLines(t, events.lines(retryEventTypes...),
					"auto_retry_start 1/3 delay=0ms class=usage_limit",
					"auto_retry_end success=true attempt=1",
					"agent_settled success=true",
				)
				st := srv.Stats()
				if st.ByKey["key-a"] != 1 || st.ByKey["key-b"] != 1 || st.Total != 2 {
					t.Errorf("fakellm by_key %v total %d; want key-a 1, key-b 1, total 2", st.ByKey, st.Total)
				}
				if st.ByRule["key-a-limited"] != 1 || st.ByRule["default"] != 1 {
					t.Errorf("fakellm by_rule %v", st.ByRule)
				}

				// The switch is sticky: the next prompt goes straight to key-b.
				msg, err = prompt(t, s, events, 2, "Hello again")
				if err != nil || msg.Text() != "Answered with key-b." {
					t.Fatalf("second prompt = %q, %v", msg.Text(), err)
				}
				if n := len(events.starts()); n != 1 {
					t.Errorf("second prompt retried: %v", events.lines(retryEventTypes...))
				}
				if st := srv.Stats(); st.ByKey["key-a"] != 1 || st.ByKey["key-b"] != 2 {
					t.Errorf("fakellm by_key %v after the second prompt; want key-a 1, key-b 2", st.ByKey)
				}
			})
		}
	}
}

// TestModelFallbackEndToEnd: model m1 is overloaded, the retry falls back
// to m2 at once and succeeds there.
func TestModelFallbackEndToEnd(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, &fakellm.Scenario{
				Rules: []fakellm.Rule{
					{Name: "m1-overloaded", Match: fakellm.Match{Model: "m1"}, Respond: fakellm.Respond{Preset: "overloaded"}},
					{Name: "m2-works", Match: fakellm.Match{Model: "m2"}, Respond: fakellm.Respond{Text: "Answered by m2."}},
				},
			})
			p, _ := newProvider(t, k, srv.base, 10*time.Second)
			rt := newFallbackRuntime(t, p)
			s, events := newSession(t, rt, "fake/m1")

			msg, err := prompt(t, s, events, 1, "Hello")
			if err != nil || msg.Text() != "Answered by m2." {
				t.Fatalf("prompt = %q, %v; events %v", msg.Text(), err, events.lines())
			}
			expectLines(t, events.lines(retryEventTypes...),
				"retry_fallback_applied fake/m1 -> fake/m2 (default)",
				"auto_retry_start 1/3 delay=0ms class=transient",
				"retry_fallback_succeeded fake/m2 (default)",
				"auto_retry_end success=true attempt=1",
				"agent_settled success=true",
			)
			if got := s.Model(); got != "fake/m2" {
				t.Errorf("session model %q after the fallback, want fake/m2", got)
			}
			if msg.Model != "m2" {
				t.Errorf("answer from model %q, want m2", msg.Model)
			}
			st := srv.Stats()
			if st.ByModel["m1"] != 1 || st.ByModel["m2"] != 1 || st.Total != 2 {
				t.Errorf("fakellm by_model %v total %d; want m1 1, m2 1, total 2", st.ByModel, st.Total)
			}

			// m1 is in cooldown (the overload estimate, 45 s or more): the
			// next prompt stays on m2 without a retry.
			msg, err = prompt(t, s, events, 2, "Hello again")
			if err != nil || msg.Text() != "Answered by m2." {
				t.Fatalf("second prompt = %q, %v", msg.Text(), err)
			}
			if n := len(events.starts()); n != 1 {
				t.Errorf("second prompt retried: %v", events.lines(retryEventTypes...))
			}
			if st := srv.Stats(); st.ByModel["m1"] != 1 || st.ByModel["m2"] != 2 {
				t.Errorf("fakellm by_model %v after the second prompt; want m1 1, m2 2", st.ByModel)
			}
		})
	}
}

// TestRetryHintsEndToEnd: a provider's retry hint reaches the retry policy
// through the real providers: a short hint sets the backoff, a hint beyond
// retry.maxDelayMs fails the prompt at once without sleeping.
func TestRetryHintsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		t.Run(k.name+"/honoured", func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, &fakellm.Scenario{
				Rules: []fakellm.Rule{{Name: "limited-once", Match: fakellm.Match{First: 1},
					Respond: fakellm.Respond{Preset: "rate_limit", Headers: map[string]string{"retry-after-ms": "150"}}}},
				Default: &fakellm.Respond{Text: "Answered after the hint."},
			})
			p, _ := newProvider(t, k, srv.base, 10*time.Second)
			rt := newRuntime(t,
				musepi.WithProvider("llm", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
				musepi.WithRetrySettings(fastRetry()))
			s, events := newSession(t, rt, "llm/model-x")
			began := time.Now()
			msg, err := prompt(t, s, events, 1, "Hello")
			if err != nil || msg.Text() != "Answered after the hint." {
				t.Fatalf("prompt = %q, %v; events %v", msg.Text(), err, events.lines())
			}
			if took := time.Since(began); took < 150*time.Millisecond {
				t.Errorf("prompt took %v, less than the 150 ms the provider asked for", took)
			}
			expectLines(t, events.lines(retryEventTypes...),
				"auto_retry_start 1/3 delay=150ms class=transient",
				"auto_retry_end success=true attempt=1",
				"agent_settled success=true",
			)
		})
		t.Run(k.name+"/beyond_max_delay", func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, &fakellm.Scenario{
				Rules: []fakellm.Rule{{Name: "limited", Match: fakellm.Match{First: 1},
					Respond: fakellm.Respond{Preset: "rate_limit", Headers: map[string]string{"retry-after": "3600"}}}},
				Default: &fakellm.Respond{Text: "Never reached."},
			})
			p, _ := newProvider(t, k, srv.base, 10*time.Second)
			rt := newRuntime(t,
				musepi.WithProvider("llm", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
				musepi.WithRetrySettings(fastRetry()))
			s, events := newSession(t, rt, "llm/model-x")
			began := time.Now()
			_, err := prompt(t, s, events, 1, "Hello")
			if !errors.Is(err, musepi.ErrPromptFailed) {
				t.Fatalf("prompt error %v, want ErrPromptFailed", err)
			}
			if took := time.Since(began); took > 3*time.Second {
				t.Errorf("prompt took %v: it should fail fast", took)
			}
			lines := events.lines(retryEventTypes...)
			if len(lines) != 2 || !strings.HasPrefix(lines[0], `auto_retry_end success=false attempt=1 error="provider asked for 3600000 ms, more than retry.maxDelayMs (300000 ms): 429`) ||
				lines[1] != "agent_settled success=false" {
				t.Errorf("events:\n  %s", strings.Join(lines, "\n  "))
			}
			if st := srv.Stats(); st.Total != 1 {
				t.Errorf("fakellm saw %d requests, want 1", st.Total)
			}
		})
	}
}
