package retry

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
)

// fixedSource returns r forever; r = 1 gives the nominal (un-jittered) delays.
type fixedSource float64

func (f fixedSource) Float64() float64 { return float64(f) }

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// script drives a chain with inputs and checks the rendered effects of each.
type script struct {
	t        *testing.T
	c        *Chain
	settings Settings
	now      time.Time
	token    uint64 // the token of the last request or timer the chain made
	gen      uint64
}

func newScript(t *testing.T, mutate ...func(*Settings)) *script {
	t.Helper()
	s := DefaultSettings()
	s.ModelFallback = false
	for _, m := range mutate {
		m(&s)
	}
	return &script{t: t, c: NewChain(fixedSource(1)), settings: s, now: t0, gen: 1}
}

// step feeds in and compares the rendered effects with want, one per line.
func (sc *script) step(in Input, want ...string) {
	sc.t.Helper()
	in.Now = sc.now
	if in.Kind == InputTurnEnded {
		in.Settings = sc.settings
		in.Generation = sc.gen
	}
	if in.Kind == InputCredentialReply || in.Kind == InputFallbackReply || in.Kind == InputSleepDone {
		in.Token = sc.token
	}
	got := sc.render(sc.c.Step(in))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		sc.t.Fatalf("effects:\n  got:  %s\n  want: %s", strings.Join(got, "\n        "), strings.Join(want, "\n        "))
	}
}

func (sc *script) render(effects []Effect) []string {
	out := make([]string, 0, len(effects))
	for _, e := range effects {
		var line string
		switch e.Kind {
		case EmitStart:
			line = fmt.Sprintf("auto_retry_start %d/%d delay=%s class=%s", e.Start.Attempt, e.Start.MaxAttempts, e.Start.Delay, e.Start.Class)
		case EmitEnd:
			line = fmt.Sprintf("auto_retry_end success=%t attempt=%d", e.End.Success, e.End.Attempt)
			if e.End.FinalError != "" {
				line += fmt.Sprintf(" error=%q", e.End.FinalError)
			}
		case EmitFallbackApplied:
			line = fmt.Sprintf("retry_fallback_applied %s -> %s (%s)", e.Fallback.From, e.Fallback.To, e.Fallback.Role)
		case EmitFallbackSucceeded:
			line = fmt.Sprintf("retry_fallback_succeeded %s (%s)", e.Fallback.To, e.Fallback.Role)
		case AskCredentialSwitch:
			line = fmt.Sprintf("ask_credential_switch block=%s", e.BlockFor)
			sc.token = e.Token
		case AskModelFallback:
			line = fmt.Sprintf("ask_model_fallback cooldown=%s pin=%t", e.BlockFor, e.Pin)
			sc.token = e.Token
		case Sleep:
			line = fmt.Sprintf("sleep %s", e.Delay)
			sc.token = e.Token
		case ScheduleContinue:
			line = fmt.Sprintf("schedule_continue %s gen=%d", e.Delay, e.Generation)
		default:
			line = e.Kind.String()
		}
		out = append(out, line)
	}
	return out
}

func errorMsg(text string, status int, headers ...string) *messages.AssistantMessage {
	m := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ERROR, ErrorMessage: text, HttpStatus: int32(status)}
	if len(headers) > 0 {
		m.Headers = map[string]string{}
		for i := 0; i+1 < len(headers); i += 2 {
			m.Headers[headers[i]] = headers[i+1]
		}
	}
	return m
}

func fail(text string, status int, headers ...string) Input {
	return Input{Kind: InputTurnEnded, Message: errorMsg(text, status, headers...)}
}

func failMsg(m *messages.AssistantMessage) Input { return Input{Kind: InputTurnEnded, Message: m} }

func ok() Input {
	return Input{Kind: InputTurnEnded, Message: &messages.AssistantMessage{
		StopReason: messages.StopReason_STOP_REASON_STOP,
		Content:    []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "hi"}}}},
	}}
}

var (
	sleepDone  = Input{Kind: InputSleepDone}
	abortRetry = Input{Kind: InputAbortRetry}
	abortAll   = Input{Kind: InputAbort}
)

func credReply(switched bool) Input { return Input{Kind: InputCredentialReply, Switched: switched} }

func fbReply(from, to, role string) Input {
	return Input{Kind: InputFallbackReply, Switched: to != "", From: from, To: to, Role: role}
}

const unavailable = "503 Service Unavailable"

// The 13 steps with defaults: a transient error retried until success.
func TestChainTransientThenSuccess(t *testing.T) {
	sc := newScript(t)
	sc.step(fail(unavailable, 503),
		"open_lifecycle",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"strip_trailing_error",
		"sleep 500ms")
	if !sc.c.IsRetrying() || sc.c.Attempt() != 1 || sc.c.Phase() != Sleeping {
		t.Fatalf("after first failure: retrying=%t attempt=%d phase=%s", sc.c.IsRetrying(), sc.c.Attempt(), sc.c.Phase())
	}
	sc.step(sleepDone, "schedule_continue 1ms gen=1")
	sc.step(fail(unavailable, 503),
		"auto_retry_start 2/10 delay=1s class=transient",
		"strip_trailing_error",
		"sleep 1s")
	sc.step(sleepDone, "schedule_continue 1ms gen=1")
	sc.step(ok(),
		"auto_retry_end success=true attempt=2",
		"close_lifecycle")
	if sc.c.IsRetrying() || sc.c.Attempt() != 0 {
		t.Fatalf("after success: retrying=%t attempt=%d", sc.c.IsRetrying(), sc.c.Attempt())
	}
}

func TestChainDefaultBackoffSequence(t *testing.T) {
	sc := newScript(t)
	want := []string{"500ms", "1s", "2s", "4s", "8s", "8s", "8s", "8s", "8s", "8s"}
	for i, d := range want {
		lines := []string{
			fmt.Sprintf("auto_retry_start %d/10 delay=%s class=transient", i+1, d),
			"strip_trailing_error",
			"sleep " + d,
		}
		if i == 0 {
			lines = append([]string{"open_lifecycle"}, lines...)
		}
		sc.step(fail("overloaded_error", 529), lines...)
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
	}
	// Max retries exceeded: the end reports attempt-1, the last attempted retry.
	sc.step(fail("overloaded_error", 529),
		`auto_retry_end success=false attempt=10 error="overloaded_error"`,
		"close_lifecycle")
	// A later retryable error starts a new chain from attempt 1.
	sc.step(fail("overloaded_error", 529),
		"open_lifecycle",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"strip_trailing_error",
		"sleep 500ms")
}

func TestChainJitterScalesDelay(t *testing.T) {
	c := NewChain(fixedSource(0))
	eff := c.Step(TurnEnded(t0, DefaultSettingsNoFallback(), errorMsg(unavailable, 503), AbortState{}, 1))
	for _, e := range eff {
		if e.Kind == Sleep && e.Delay != 375*time.Millisecond {
			t.Fatalf("jitter 0: delay %s, want 375ms (75 %% of 500ms)", e.Delay)
		}
	}
}

// DefaultSettingsNoFallback is the default settings with model fallback off.
func DefaultSettingsNoFallback() Settings {
	s := DefaultSettings()
	s.ModelFallback = false
	return s
}

func TestChainMaxRetriesZero(t *testing.T) {
	sc := newScript(t, func(s *Settings) { s.MaxRetries = 0 })
	sc.step(fail(unavailable, 503),
		"open_lifecycle",
		`auto_retry_end success=false attempt=0 error="503 Service Unavailable"`,
		"close_lifecycle")
}

func TestChainHints(t *testing.T) {
	t.Run("a hint extends the backoff", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail("429 Too Many Requests", 429, "retry-after", "3"),
			"open_lifecycle",
			"auto_retry_start 1/10 delay=3s class=transient",
			"strip_trailing_error",
			"sleep 3s")
	})
	t.Run("a hint never shortens the backoff", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(fail(unavailable, 503), "auto_retry_start 2/10 delay=1s class=transient", "strip_trailing_error", "sleep 1s")
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(fail("rate limited", 429, "retry-after-ms", "100"),
			"auto_retry_start 3/10 delay=2s class=transient", "strip_trailing_error", "sleep 2s")
	})
	t.Run("a hint above maxDelayMs fails fast with one end and no start", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail("429 Too Many Requests", 429, "retry-after", "600"),
			"open_lifecycle",
			`auto_retry_end success=false attempt=1 error="provider asked for 600000 ms, more than retry.maxDelayMs (300000 ms): 429 Too Many Requests"`,
			"close_lifecycle")
	})
	t.Run("maxDelayMs <= 0 turns the cap off", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.MaxDelay = 0 })
		sc.step(fail("429 Too Many Requests", 429, "retry-after", "600"),
			"open_lifecycle",
			"auto_retry_start 1/10 delay=10m0s class=transient",
			"strip_trailing_error",
			"sleep 10m0s")
	})
}

func TestChainStaleReplayResetsSessionWithNoDelay(t *testing.T) {
	sc := newScript(t)
	sc.step(fail("Item with id 'rs_1' not found.", 400),
		"open_lifecycle",
		"reset_provider_session",
		"auto_retry_start 1/10 delay=0s class=stale_replay",
		"strip_trailing_error",
		"sleep 0s")
}

// Spec 3 step 8: a stale replay never consults the fallback chain and puts
// no model in cooldown, even with model fallback on.
func TestChainStaleReplaySkipsModelFallback(t *testing.T) {
	sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
	sc.step(fail("400 Bad Request: Previous response with id 'resp_9' not found. (code: previous_response_not_found)", 400),
		"open_lifecycle",
		"reset_provider_session",
		"auto_retry_start 1/10 delay=0s class=stale_replay",
		"strip_trailing_error",
		"sleep 0s")
}

// Spec 3, "What resets the counter": a tool-use message is a successful
// assistant message, so inside a tool loop each recovered failure closes its
// own chain and the next failure starts again at attempt 1.
func TestChainToolUseMessageResetsCounter(t *testing.T) {
	toolUse := Input{Kind: InputTurnEnded, Message: &messages.AssistantMessage{
		StopReason: messages.StopReason_STOP_REASON_TOOL_USE,
		Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_ToolCall{
			ToolCall: &messages.ToolCall{Id: "call_1", Name: "read", ArgumentsJson: "{}"}}}},
	}}
	sc := newScript(t)
	for range 2 {
		sc.step(fail("503 Service Unavailable", 503),
			"open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(toolUse, "auto_retry_end success=true attempt=1", "close_lifecycle")
	}
	sc.step(ok()) // the answer after the loop: no chain is open
}

func TestChainUsageLimit(t *testing.T) {
	const quota = "You exceeded your current quota (insufficient_quota)"
	t.Run("credential switch gives delay 0 and skips model fallback", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail(quota, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		sc.step(credReply(true),
			"auto_retry_start 1/10 delay=0s class=usage_limit",
			"strip_trailing_error",
			"sleep 0s")
	})
	t.Run("no switch, no hint: the 30 min quota estimate exceeds maxDelayMs and fails fast", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(quota, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		sc.step(credReply(false),
			`auto_retry_end success=false attempt=1 error="provider asked for 1800000 ms, more than retry.maxDelayMs (300000 ms): `+quota+`"`,
			"close_lifecycle")
	})
	// Spec 4: the reason estimate reads the provider's words, never the
	// status line our adapters put in front ("429 Too Many Requests").
	for _, text := range []string{
		"429 Too Many Requests: You exceeded your current quota, please check your plan and billing details. (code: insufficient_quota, type: insufficient_quota)",
		"429 Too Many Requests: The usage limit has been reached (code: usage_limit_reached, type: usage_limit_reached)",
		"429 Too Many Requests: rate_limit_error: Claude AI usage limit reached for this period.",
	} {
		t.Run("status line is not the reason: "+text, func(t *testing.T) {
			sc := newScript(t)
			sc.step(fail(text, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
			sc.step(credReply(false),
				`auto_retry_end success=false attempt=1 error="provider asked for 1800000 ms, more than retry.maxDelayMs (300000 ms): `+text+`"`,
				"close_lifecycle")
		})
	}
	t.Run("the provider's own rate-limit words still give 30 s", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail("429 Too Many Requests: usage limit: too many requests per minute", 429), "open_lifecycle", "ask_credential_switch block=30s")
	})
	t.Run("no switch: wait until the earliest blocked sibling frees up, plus 1 s", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(quota, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		in := credReply(false)
		in.RetryAt = t0.Add(20 * time.Second)
		sc.step(in,
			"auto_retry_start 1/10 delay=21s class=usage_limit",
			"strip_trailing_error",
			"sleep 21s")
	})
	t.Run("no switch: the provider hint wins when it comes first", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(quota, 429, "retry-after", "5"), "open_lifecycle", "ask_credential_switch block=5s")
		in := credReply(false)
		in.RetryAt = t0.Add(time.Minute)
		sc.step(in, "auto_retry_start 1/10 delay=5s class=usage_limit", "strip_trailing_error", "sleep 5s")
	})
	t.Run("a sibling free already leaves the local backoff", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(quota, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		in := credReply(false)
		in.RetryAt = t0.Add(-time.Minute)
		sc.step(in, "auto_retry_start 1/10 delay=500ms class=usage_limit", "strip_trailing_error", "sleep 500ms")
	})
	t.Run("no switch: model fallback is asked next, and its switch avoids the fail-fast", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail(quota, 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		sc.step(credReply(false), "ask_model_fallback cooldown=30m0s pin=false")
		sc.step(fbReply("openai/a", "openai/b", "default"),
			"retry_fallback_applied openai/a -> openai/b (default)",
			"auto_retry_start 1/10 delay=0s class=usage_limit",
			"strip_trailing_error",
			"sleep 0s")
	})
}

func TestChainModelFallback(t *testing.T) {
	t.Run("switch: applied, start with delay 0, then succeeded before the end", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail("overloaded_error", 529), "open_lifecycle", "ask_model_fallback cooldown=1m15s pin=false")
		sc.step(fbReply("anthropic/opus", "anthropic/sonnet", "default"),
			"retry_fallback_applied anthropic/opus -> anthropic/sonnet (default)",
			"auto_retry_start 1/10 delay=0s class=transient",
			"strip_trailing_error",
			"sleep 0s")
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(ok(),
			"retry_fallback_succeeded anthropic/sonnet (default)",
			"auto_retry_end success=true attempt=1",
			"close_lifecycle")
	})
	t.Run("no switch: the local backoff applies", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail("overloaded_error", 529), "open_lifecycle", "ask_model_fallback cooldown=1m15s pin=false")
		sc.step(fbReply("", "", ""), "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
	})
	t.Run("the cooldown is the provider's hint when there is one", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail("rate limited", 429, "retry-after", "7"), "open_lifecycle", "ask_model_fallback cooldown=7s pin=false")
	})
	t.Run("no chain for the role: no question, the local backoff applies", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.c.NoFallbackChain()
		sc.step(fail("overloaded_error", 529), "open_lifecycle",
			"auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
	})
	t.Run("no chain for the role: a refusal ends silently", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.c.NoFallbackChain()
		sc.step(failMsg(refusal(StopDetailRefusal)), "open_lifecycle", "close_lifecycle")
	})
	t.Run("a switch lifts the max-delay fail-fast", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail("rate limited", 429, "retry-after", "600"), "open_lifecycle", "ask_model_fallback cooldown=10m0s pin=false")
		sc.step(fbReply("openai/a", "openai/b", "default"),
			"retry_fallback_applied openai/a -> openai/b (default)",
			"auto_retry_start 1/10 delay=0s class=transient", "strip_trailing_error", "sleep 0s")
	})
}

func refusal(kind string) *messages.AssistantMessage {
	m := errorMsg("I can't help with that.", 0)
	m.StopDetails = &messages.StopDetails{Type: kind}
	m.Content = []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: "partial"}}}}
	return m
}

func TestChainClassifierRefusal(t *testing.T) {
	t.Run("fallback applied and pinned", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(failMsg(refusal(StopDetailRefusal)), "open_lifecycle", "ask_model_fallback cooldown=0s pin=true")
		sc.step(fbReply("anthropic/opus", "openai/gpt", "default"),
			"retry_fallback_applied anthropic/opus -> openai/gpt (default)",
			"auto_retry_start 1/10 delay=0s class=classifier_refusal", "strip_trailing_error", "sleep 0s")
	})
	t.Run("no fallback on the first attempt: silent end, no start", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(failMsg(refusal(StopDetailSensitive)), "open_lifecycle", "ask_model_fallback cooldown=0s pin=true")
		sc.step(fbReply("", "", ""), "close_lifecycle")
		if sc.c.IsRetrying() || sc.c.Attempt() != 0 {
			t.Fatal("the chain must be closed and reset")
		}
	})
	t.Run("model fallback off: silent end", func(t *testing.T) {
		sc := newScript(t)
		sc.step(failMsg(refusal(StopDetailRefusal)), "open_lifecycle", "close_lifecycle")
	})
	t.Run("no fallback after a started attempt: end reports attempt-1", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
		sc.step(fail(unavailable, 503), "open_lifecycle", "ask_model_fallback cooldown=1m15s pin=false")
		sc.step(fbReply("", "", ""), "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(failMsg(refusal(StopDetailRefusal)), "ask_model_fallback cooldown=0s pin=true")
		sc.step(fbReply("", "", ""),
			`auto_retry_end success=false attempt=1 error="I can't help with that."`,
			"close_lifecycle")
	})
}

func TestChainReasonlessAbortSkipsModelFallback(t *testing.T) {
	sc := newScript(t, func(s *Settings) { s.ModelFallback = true })
	m := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_ABORTED, ErrorMessage: AbortSentinel}
	sc.step(failMsg(m),
		"open_lifecycle",
		"auto_retry_start 1/10 delay=500ms class=reasonless_abort",
		"strip_trailing_error",
		"sleep 500ms")
	t.Run("not during a user abort", func(t *testing.T) {
		sc := newScript(t)
		in := failMsg(m)
		in.Aborts = AbortState{User: true}
		sc.step(in)
	})
}

// Every reset case of spec section 3 and every permanent stop of section 9.
func TestChainStops(t *testing.T) {
	t.Run("abort_retry during the backoff: Retry cancelled", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.step(abortRetry, "cancel_sleep", `auto_retry_end success=false attempt=1 error="Retry cancelled"`, "close_lifecycle")
		sc.step(sleepDone) // the cancelled timer's firing is ignored
		sc.step(abortRetry)
	})
	t.Run("global abort cancels the backoff first, then the stream", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.step(abortAll, "cancel_sleep", `auto_retry_end success=false attempt=1 error="Retry cancelled"`, "close_lifecycle", "abort_stream")
		sc.step(abortAll, "abort_stream")
	})
	t.Run("abort_retry while waiting for a credential reply", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail("usage limit reached", 429), "open_lifecycle", "ask_credential_switch block=30m0s")
		sc.step(abortRetry, `auto_retry_end success=false attempt=1 error="Retry cancelled"`, "close_lifecycle")
		sc.step(credReply(true)) // stale reply ignored
	})
	t.Run("retry disabled: no chain starts", func(t *testing.T) {
		sc := newScript(t, func(s *Settings) { s.Enabled = false })
		sc.step(fail(unavailable, 503))
	})
	t.Run("retry disabled mid-chain: the backoff finishes, the next error ends the chain", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.settings.Enabled = false
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(fail("502 Bad Gateway", 502), `auto_retry_end success=false attempt=1 error="502 Bad Gateway"`, "close_lifecycle")
	})
	t.Run("a non-retryable error closes an open chain", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(fail("401 invalid x-api-key", 401), `auto_retry_end success=false attempt=1 error="401 invalid x-api-key"`, "close_lifecycle")
	})
	t.Run("a turn ending while a user abort is in progress is never retried", func(t *testing.T) {
		for _, aborts := range []AbortState{{User: true}, {Dispose: true}, {EditGuard: true}} {
			sc := newScript(t)
			in := fail("stream stalled: no data for 120s", 0)
			in.Aborts = aborts
			sc.step(in)
		}
	})
	t.Run("a non-retryable error with no chain does nothing", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail("400 invalid_request_error: messages: field required", 400))
	})
	t.Run("context overflow goes to compaction, never retried", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail("prompt is too long: 230500 tokens > 200000 maximum", 400), "route_to_compaction")
	})
	t.Run("context overflow closes an open chain, then compaction", func(t *testing.T) {
		sc := newScript(t)
		sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
		sc.step(sleepDone, "schedule_continue 1ms gen=1")
		sc.step(fail("maximum context length is 128000 tokens", 400),
			`auto_retry_end success=false attempt=1 error="maximum context length is 128000 tokens"`, "close_lifecycle", "route_to_compaction")
	})
	t.Run("a success with no chain open emits nothing", func(t *testing.T) {
		sc := newScript(t)
		sc.step(ok())
	})
	t.Run("a partly produced turn is not replayed", func(t *testing.T) {
		sc := newScript(t)
		m := errorMsg("connection reset by peer", 0)
		m.Content = []*messages.ContentBlock{{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "1", Name: "ls"}}}}
		sc.step(failMsg(m))
	})
}

func TestChainIgnoresStaleAndOutOfPhaseInputs(t *testing.T) {
	sc := newScript(t)
	sc.step(sleepDone)
	sc.step(credReply(true))
	sc.step(fbReply("a/b", "a/c", "default"))
	sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
	sc.token-- // a firing of an older timer
	sc.step(Input{Kind: InputSleepDone, Token: sc.token})
	if sc.c.Phase() != Sleeping {
		t.Fatalf("phase %s, want sleeping", sc.c.Phase())
	}
}

func TestChainTurnEndingDuringSleepCancelsIt(t *testing.T) {
	sc := newScript(t)
	sc.step(fail(unavailable, 503), "open_lifecycle", "auto_retry_start 1/10 delay=500ms class=transient", "strip_trailing_error", "sleep 500ms")
	sc.step(ok(), "cancel_sleep", "auto_retry_end success=true attempt=1", "close_lifecycle")
}

func TestChainAttemptNeverOverflows(t *testing.T) {
	c := NewChain(fixedSource(1))
	s := DefaultSettingsNoFallback()
	s.MaxRetries = maxAttempt
	c.attempt = maxAttempt - 1
	c.phase = AwaitingTurn
	for range 3 {
		for _, e := range c.Step(TurnEnded(t0, s, errorMsg(unavailable, 503), AbortState{}, 1)) {
			if e.Kind == Sleep && (e.Delay <= 0 || e.Delay > MaxBackoff) {
				t.Fatalf("delay %s at attempt %d", e.Delay, c.Attempt())
			}
		}
		c.Step(Input{Kind: InputSleepDone, Token: c.token})
	}
	if c.Attempt() < 0 {
		t.Fatalf("attempt overflowed: %d", c.Attempt())
	}
}

func TestChainStepAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	c := NewChain(fixedSource(0.5))
	s := DefaultSettingsNoFallback()
	s.MaxRetries = 1 << 30
	msg := errorMsg(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529)
	in := TurnEnded(t0, s, msg, AbortState{}, 1)
	c.Step(in)
	allocs := testing.AllocsPerRun(1000, func() {
		c.Step(Input{Kind: InputSleepDone, Token: c.token})
		c.Step(in)
	})
	if allocs != 0 {
		t.Fatalf("steady-state chain steps allocate %.1f times, want 0", allocs)
	}
}

func BenchmarkChainStep(b *testing.B) {
	c := NewChain(fixedSource(0.5))
	s := DefaultSettingsNoFallback()
	s.MaxRetries = 1 << 30
	msg := errorMsg(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529)
	in := TurnEnded(t0, s, msg, AbortState{}, 1)
	c.Step(in)
	b.ReportAllocs()
	for b.Loop() {
		c.Step(Input{Kind: InputSleepDone, Token: c.token})
		c.Step(in)
	}
}

// ChainState holds every field of Chain but its source, its configuration
// (settings, noFallbackChain) and buffers: a new field of the chain must be
// recorded too.
func TestChainStateCoversTheChain(t *testing.T) {
	notState := map[string]bool{"src": true, "settings": true, "noFallbackChain": true, "out": true, "stepBuf": true}
	state := map[string]bool{}
	st := reflect.TypeFor[ChainState]()
	for i := range st.NumField() {
		state[strings.ToLower(st.Field(i).Name)] = true
	}
	ct := reflect.TypeFor[Chain]()
	for i := range ct.NumField() {
		if name := ct.Field(i).Name; !notState[name] && !state[strings.ToLower(name)] {
			t.Errorf("Chain.%s is not in ChainState", name)
		}
	}
}
