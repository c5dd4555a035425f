package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
)

// The scripted events of the summary tests: one prompt's, as a session
// emits them.
var (
	evPrompt    = musepi.AgentStart{User: &musepi.UserMessage{Text: "hello"}}
	evRetryCall = musepi.AgentStart{} // a retry's call goes out
	evFailed    = musepi.AgentEnd{Message: &musepi.AssistantMessage{StopReason: musepi.StopReasonError,
		ErrorMessage: "503 Service Unavailable"}}
	evSettled = musepi.AgentSettled{}
)

func evRetryStart(n int, delay time.Duration) musepi.AutoRetryStart {
	return musepi.AutoRetryStart{Attempt: n, MaxAttempts: 10, Delay: delay, ErrorClass: "transient"}
}

// script is the events of a chain of retries: the prompt's call fails, and
// each retry made fails again, until the last retry's call.
func script(retries int) []musepi.Event {
	evs := []musepi.Event{evPrompt, evFailed}
	for n := 1; n <= retries; n++ {
		evs = append(evs, evRetryStart(n, time.Second), evRetryCall)
		if n < retries {
			evs = append(evs, evFailed)
		}
	}
	return evs
}

// Each summary of the demo counts the retries made (a retry counts once
// its call went out), whatever auto_retry_end's attempt says: the
// recovered and failure lines, the ⏱ line, and Ctrl-C's interrupt line.
func TestDemoSummary(t *testing.T) {
	const over = "provider asked for 600000 ms, more than retry.maxDelayMs (300000 ms): 429 Too Many Requests"
	cases := []struct {
		name      string
		events    []musepi.Event
		err       error // the prompt's
		interrupt bool  // Ctrl-C after the events
		want      string
	}{
		{name: "success after 1 retry",
			events: append(script(1), musepi.AutoRetryEnd{Success: true, Attempt: 1}, evSettled),
			want: `  → calling fake/m1
  ✗ 503 Service Unavailable
  ⏳ retry 1/10 in 1.0s (exponential backoff with jitter)
  → calling fake/m1
  ✓ recovered after 1 retry
  answer (fake/m1): hi
  ⏱ 0.0 s, 2 calls, 1 retry (0.0 s of backoff)
`},
		{name: "give-up with maxRetries 0",
			events: append(script(0), musepi.AutoRetryEnd{Attempt: 0, FinalError: "503 Service Unavailable"}, evSettled),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: "503 Service Unavailable"},
			want: `  → calling fake/m1
  ✗ 503 Service Unavailable
  ✗ Retry failed after 0 attempts: 503 Service Unavailable
  ⏱ 0.0 s, 1 call, 0 retries (0.0 s of backoff)
`},
		{name: "the give-up scenario: a first wait over retry.maxDelayMs",
			events: append(script(0), musepi.AutoRetryEnd{Attempt: 1, FinalError: over}, evSettled),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: over},
			want: `  → calling fake/m1
  ✗ 503 Service Unavailable
  ✗ Retry failed after 0 attempts: ` + over + `
  ⏱ 0.0 s, 1 call, 0 retries (0.0 s of backoff)
`},
		{name: "a wait over retry.maxDelayMs after retry 1",
			events: append(script(1), evFailed, musepi.AutoRetryEnd{Attempt: 2, FinalError: over}, evSettled),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: over},
			want: `  → calling fake/m1
  ✗ 503 Service Unavailable
  ⏳ retry 1/10 in 1.0s (exponential backoff with jitter)
  → calling fake/m1
  ✗ 503 Service Unavailable
  ✗ Retry failed after 1 attempt: ` + over + `
  ⏱ 0.0 s, 2 calls, 1 retry (0.0 s of backoff)
`},
		{name: "give up after 2 retries (maxRetries 2)",
			events: append(script(2), evFailed, musepi.AutoRetryEnd{Attempt: 2, FinalError: "503 Service Unavailable"}, evSettled),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: "503 Service Unavailable"},
			want: `  → calling fake/m1
  ✗ 503 Service Unavailable
  ⏳ retry 1/10 in 1.0s (exponential backoff with jitter)
  → calling fake/m1
  ✗ 503 Service Unavailable
  ⏳ retry 2/10 in 1.0s (exponential backoff with jitter)
  → calling fake/m1
  ✗ 503 Service Unavailable
  ✗ Retry failed after 2 attempts: 503 Service Unavailable
  ⏱ 0.0 s, 3 calls, 2 retries (0.0 s of backoff)
`},
		{name: "Ctrl-C while retry 3/10 waits",
			events:    append(script(2), evFailed, evRetryStart(3, 3*time.Second)),
			interrupt: true,
			want: `  → calling fake/m1
  ✗ 503 Service Unavailable
  ⏳ retry 1/10 in 1.0s (exponential backoff with jitter)
  → calling fake/m1
  ✗ 503 Service Unavailable
  ⏳ retry 2/10 in 1.0s (exponential backoff with jitter)
  → calling fake/m1
  ✗ 503 Service Unavailable
  ⏳ retry 3/10 in 3.0s (exponential backoff with jitter)
  ⏳ retry 3/10 cancelled after 0.0s
■ Interrupted in the backoff before retry 3/10; the prompt was aborted and nothing more is sent: 0.0 s, 3 calls, 2 retries (0.0 s of backoff)
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			p := newDemoPrinter(&out, false)
			at := time.Unix(1_700_000_000, 0)
			p.now = func() time.Time { return at }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			run := p.begin(ctx, "fake/m1", make(chan struct{}))
			for _, ev := range tc.events {
				run.event(ev)
			}
			if tc.interrupt {
				cancel()
				run.stop()
				p.interrupted()
			} else {
				run.finish(&musepi.AssistantMessage{Content: []musepi.Block{musepi.TextBlock{Text: "hi"}}}, tc.err)
			}
			p.close()
			if got := out.String(); got != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
