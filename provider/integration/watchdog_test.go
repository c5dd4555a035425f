package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/retry"
)

// The idle-stream watchdog (musepi.WithStreamIdleTimeout) ends a stream that
// sends nothing as a transient "stream stalled" error, which the policy
// retries like any transient error, unless output had already streamed,
// which is never replayed. The providers have no request timeout here: only
// the watchdog can end the stall.
func TestStalledStreamWatchdog(t *testing.T) {
	const idle = 300 * time.Millisecond
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, &fakellm.Scenario{
				Rules: []fakellm.Rule{
					{Name: "stall-once", Match: fakellm.Match{Model: "quiet", First: 1}, Respond: fakellm.Respond{StallMs: 30000}},
					{Name: "stall-after-text", Match: fakellm.Match{Model: "chatty"},
						Respond: fakellm.Respond{Text: "Partial answer that never ends", Chunks: 3, StallAfter: 1, StallMs: 30000}},
				},
				Default: &fakellm.Respond{Text: "Answered after the stall."},
			})
			p, _ := newProvider(t, k, srv.base, 0)
			rt := newRuntime(t,
				musepi.WithProvider("llm", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
				musepi.WithRetrySettings(fastRetry()),
				musepi.WithStreamIdleTimeout(idle))

			t.Run("a stall before any output is retried", func(t *testing.T) {
				s, events := newSession(t, rt, "llm/quiet")
				msg, err := prompt(t, s, events, 1, "Hello")
				if err != nil || msg.Text() != "Answered after the stall." {
					t.Fatalf("prompt = %q, %v; events %v", msg.Text(), err, events.lines())
				}
				starts := events.starts()
				if len(starts) != 1 || starts[0].ErrorClass != retry.Transient.String() ||
					!strings.Contains(starts[0].ErrorMessage, "stream stalled") {
					t.Fatalf("auto_retry_start events %v", starts)
				}
			})
			t.Run("a stall after output is not replayed", func(t *testing.T) {
				s, events := newSession(t, rt, "llm/chatty")
				msg, err := prompt(t, s, events, 1, "Hello")
				if !errors.Is(err, musepi.ErrPromptFailed) {
					t.Fatalf("prompt error %v, want ErrPromptFailed", err)
				}
				if msg.StopDetails == nil || msg.StopDetails.Type != retry.StopDetailStreamInterruptedAfterContent || msg.Text() == "" ||
					!strings.Contains(msg.ErrorMessage, "stream stalled") {
					t.Fatalf("message %v", msg)
				}
				if n := len(events.starts()); n != 0 {
					t.Fatalf("%d auto_retry_start events, want none", n)
				}
			})
		})
	}
}
