package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/retry"
)

// requestTimeout is the providers' Config.RequestTimeout in the stall tests.
const requestTimeout = 300 * time.Millisecond

// TestStallEndsWithTimeout: a stream that stalls is ended by the provider's
// RequestTimeout with a transient "context deadline exceeded" error (or a
// non-retryable interrupted turn when text was already streamed), and a
// session retries the stall to success when the next call answers.
func TestStallEndsWithTimeout(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			t.Run("stream", func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, &fakellm.Scenario{Rules: []fakellm.Rule{
					{Name: "stall-before-output", Match: fakellm.Match{Model: "stall"}, Respond: fakellm.Respond{StallMs: 30000}},
					{Name: "stall-after-output", Match: fakellm.Match{Model: "stall-late"},
						Respond: fakellm.Respond{Text: "Some text then silence", Chunks: 4, StallMs: 30000, StallAfter: 1}},
				}})
				p, _ := newProvider(t, k, srv.base, requestTimeout)

				for _, tc := range []struct {
					model     string
					class     retry.Class
					stop      string
					wantDelta bool
				}{
					{"stall", retry.Transient, "", false},
					{"stall-late", retry.NotRetryable, retry.StopDetailStreamInterruptedAfterContent, true},
				} {
					began := time.Now()
					msg, deltas := stream(t, p, provider.Request{SessionID: "stall-" + tc.model, Model: tc.model,
						Credential: "main", APIKey: "key-main", Context: []*messages.Entry{userEntry("Hello?")}})
					took := time.Since(began)
					t.Logf("%s: %v after %v: %q", tc.model, msg.GetStopReason(), took, msg.GetErrorMessage())
					if msg.GetStopReason() != messages.StopReason_STOP_REASON_ERROR {
						t.Fatalf("%s: stop reason %v (%q), want ERROR", tc.model, msg.GetStopReason(), msg.GetErrorMessage())
					}
					if !strings.Contains(msg.GetErrorMessage(), "context deadline exceeded") {
						t.Errorf("%s: error %q does not say context deadline exceeded", tc.model, msg.GetErrorMessage())
					}
					if took < requestTimeout || took > requestTimeout+2*time.Second {
						t.Errorf("%s: Stream returned after %v, want about %v", tc.model, took, requestTimeout)
					}
					if got := retry.Classify(msg, retry.AbortState{}); got != tc.class {
						t.Errorf("%s: Classify = %v, want %v", tc.model, got, tc.class)
					}
					if got := msg.GetStopDetails().GetType(); got != tc.stop {
						t.Errorf("%s: stop details %q, want %q", tc.model, got, tc.stop)
					}
					if (len(deltas) > 0) != tc.wantDelta {
						t.Errorf("%s: %d deltas streamed, want some: %t", tc.model, len(deltas), tc.wantDelta)
					}
				}
				// The server's handlers end once the client has gone.
				waitActive(t, srv, 0, 2*time.Second)
			})

			t.Run("session", func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, &fakellm.Scenario{
					Rules:   []fakellm.Rule{{Name: "stall-once", Match: fakellm.Match{First: 1}, Respond: fakellm.Respond{StallMs: 30000}}},
					Default: &fakellm.Respond{Text: "Answered after the stall."},
				})
				p, _ := newProvider(t, k, srv.base, requestTimeout)
				rt := newRuntime(t,
					musepi.WithProvider("llm", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
					musepi.WithRetrySettings(fastRetry()))
				s, events := newSession(t, rt, "llm/model-x")

				began := time.Now()
				msg, err := prompt(t, s, events, 1, "Hello")
				took := time.Since(began)
				if err != nil || msg.Text() != "Answered after the stall." {
					t.Fatalf("prompt = %q, %v; events %v", msg.Text(), err, events.lines())
				}
				if took < requestTimeout || took > requestTimeout+3*time.Second {
					t.Errorf("prompt took %v, want a little over %v", took, requestTimeout)
				}
				starts := events.starts()
				if len(starts) != 1 {
					t.Fatalf("events %v, want one auto_retry_start", events.lines(retryEventTypes...))
				}
				st0 := starts[0]
				if st0.ErrorClass != "transient" || !strings.Contains(st0.ErrorMessage, "context deadline exceeded") {
					t.Errorf("auto_retry_start class %q error %q; want transient, context deadline exceeded", st0.ErrorClass, st0.ErrorMessage)
				}
				// Backoff of attempt 1: BaseDelay (5 ms) times a jitter in [0.75, 1].
				if d := st0.Delay.Milliseconds(); d < 3 || d > 5 {
					t.Errorf("auto_retry_start delay %d ms, want 3-5 ms", d)
				}
				lines := events.lines(retryEventTypes...)
				if len(lines) != 3 || lines[1] != "auto_retry_end success=true attempt=1" || lines[2] != "agent_settled success=true" {
					t.Errorf("events %v", lines)
				}
				if st := srv.Stats(); st.Total != 2 || st.ByRule["stall-once"] != 1 || st.ByRule["default"] != 1 {
					t.Errorf("fakellm total %d by_rule %v; want 2, stall-once 1, default 1", st.Total, st.ByRule)
				}
				waitActive(t, srv, 0, 2*time.Second)
			})
		})
	}
}

// TestCancellationAbortsStreamAtOnce: cancelling the caller's context
// during a stalled stream makes Stream return ABORTED at once, and the
// server sees the client go away.
func TestCancellationAbortsStreamAtOnce(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		for _, stallAfter := range []int{0, 1} {
			name := k.name + "/before_output"
			if stallAfter > 0 {
				name = k.name + "/after_output"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := startServer(t, &fakellm.Scenario{Rules: []fakellm.Rule{{
					Name:    "stall",
					Respond: fakellm.Respond{Text: "Some text then silence", Chunks: 4, StallMs: 30000, StallAfter: stallAfter},
				}}})
				// No RequestTimeout: only the caller's cancellation ends the call.
				p, _ := newProvider(t, k, srv.base, 0)

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				type result struct {
					msg    *messages.AssistantMessage
					deltas int
					at     time.Time
				}
				done := make(chan result, 1)
				deltas := make(chan struct{}, 100)
				go func() {
					n := 0
					msg := p.Stream(ctx, provider.Request{SessionID: "cancel", Model: "model-x", Credential: "main",
						APIKey: "key-main", Context: []*messages.Entry{userEntry("Hello?")}},
						func(provider.Delta) {
							n++
							select {
							case deltas <- struct{}{}:
							default:
							}
						})
					done <- result{msg, n, time.Now()}
				}()

				// Wait until the server is stalling the request (and, for
				// after_output, until the first text arrived).
				waitActive(t, srv, 1, testTimeout)
				if stallAfter > 0 {
					select {
					case <-deltas:
					case <-time.After(testTimeout):
						t.Fatal("no delta before the stall")
					}
				}
				time.Sleep(50 * time.Millisecond)
				select {
				case r := <-done:
					t.Fatalf("Stream returned before the cancel: %v %q", r.msg.GetStopReason(), r.msg.GetErrorMessage())
				default:
				}

				cancelled := time.Now()
				cancel()
				var r result
				select {
				case r = <-done:
				case <-time.After(testTimeout):
					t.Fatal("Stream did not return after the cancel")
				}
				if took := r.at.Sub(cancelled); took > time.Second {
					t.Errorf("Stream returned %v after the cancel, want within 1 s", took)
				}
				if r.msg == nil {
					t.Fatal("Stream returned nil")
				}
				if r.msg.GetStopReason() != messages.StopReason_STOP_REASON_ABORTED {
					t.Errorf("stop reason %v (%q), want ABORTED", r.msg.GetStopReason(), r.msg.GetErrorMessage())
				}
				if stallAfter > 0 && textOf(r.msg) == "" {
					t.Errorf("aborted message lost the partial text streamed before the cancel")
				}
				// A user abort is deliberate: never retried.
				if got := retry.Classify(r.msg, retry.AbortState{User: true}); got != retry.NotRetryable {
					t.Errorf("Classify(user abort) = %v, want not_retryable", got)
				}
				waitActive(t, srv, 0, 2*time.Second)
			})
		}
	}
}

// TestSessionAbortDuringStall: Session.Abort during a stalled stream ends
// the prompt at once with ErrAborted, without a retry, and the server sees
// the client go away.
func TestSessionAbortDuringStall(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t, &fakellm.Scenario{
				Rules:   []fakellm.Rule{{Name: "stall-once", Match: fakellm.Match{First: 1}, Respond: fakellm.Respond{StallMs: 30000}}},
				Default: &fakellm.Respond{Text: "Second prompt answered."},
			})
			p, _ := newProvider(t, k, srv.base, 0)
			rt := newRuntime(t,
				musepi.WithProvider("llm", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
				musepi.WithRetrySettings(fastRetry()))
			s, events := newSession(t, rt, "llm/model-x")

			type result struct {
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				_, err := s.Prompt(ctx, "Hello")
				done <- result{err, time.Now()}
			}()
			waitActive(t, srv, 1, testTimeout)
			time.Sleep(50 * time.Millisecond)
			aborted := time.Now()
			s.Abort()
			var r result
			select {
			case r = <-done:
			case <-time.After(testTimeout):
				t.Fatal("Prompt did not return after Abort")
			}
			if took := r.at.Sub(aborted); took > time.Second {
				t.Errorf("Prompt returned %v after Abort, want within 1 s", took)
			}
			if !errors.Is(r.err, musepi.ErrAborted) {
				t.Errorf("prompt error %v, want ErrAborted", r.err)
			}
			events.waitFor(t, "agent_settled", 1)
			if n := len(events.starts()); n != 0 {
				t.Errorf("an abort was retried: %v", events.lines(retryEventTypes...))
			}
			waitActive(t, srv, 0, 2*time.Second)

			// The session is usable afterwards.
			msg, err := prompt(t, s, events, 2, "Hello again")
			if err != nil || msg.Text() != "Second prompt answered." {
				t.Fatalf("second prompt = %q, %v", msg.Text(), err)
			}
		})
	}
}
