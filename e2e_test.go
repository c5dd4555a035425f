package musepi_test

// End-to-end tests of the auto-retry policy (docs/retry-policy.md, sections
// 3-9) through the public API, on the virtual clock: one test per behaviour.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// ---------------------------------------------------------------- helpers

// outcome wraps a ready-made assistant message as a scripted turn.
func outcome(msg *messages.AssistantMessage) provider.Outcome {
	return provider.Outcome{Message: msg}
}

// refusal is a classifier refusal: stop_reason error with typed stop details.
func refusal(detail, text string) provider.Outcome {
	return outcome(&messages.AssistantMessage{
		StopReason:   messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: text,
		StopDetails:  &messages.StopDetails{Type: detail},
	})
}

// reasonlessAbort is a content-less stop carrying only the generic abort sentinel.
func reasonlessAbort(reason messages.StopReason) provider.Outcome {
	return outcome(&messages.AssistantMessage{StopReason: reason, ErrorMessage: retry.AbortSentinel})
}

// withFallback is the default settings with model fallback on and the
// "default" role falling back to chain.
func withFallback(chain ...string) retry.Settings {
	s := retry.DefaultSettings()
	s.ModelFallback = true
	s.FallbackChains = map[string][]string{"default": chain}
	return s
}

// runPrompt sends text, runs virtual time until idle and returns the result.
func (h *harness) runPrompt(s *musepi.Session, text string) result {
	h.t.Helper()
	ch := h.prompt(s, text)
	h.run()
	return h.settle(ch)
}

// expectAnswer fails unless r is a success whose text is want.
func expectAnswer(t *testing.T, r result, want string) {
	t.Helper()
	if r.err != nil || r.msg.Text() != want {
		t.Fatalf("prompt = %q, %v; want %q, nil", r.msg.Text(), r.err, want)
	}
}

// expectErr fails unless r failed with an error wrapping kind.
func expectErr(t *testing.T, r result, kind error) {
	t.Helper()
	if !errors.Is(r.err, kind) {
		t.Fatalf("prompt error = %v; want errors.Is(err, %v)", r.err, kind)
	}
	var pe *musepi.PromptError
	if !errors.As(r.err, &pe) {
		t.Fatalf("prompt error %T is not a *musepi.PromptError", r.err)
	}
}

// count is how many events of type typ the recorder holds.
func (r *recorder) count(typ string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

// ofType returns the events of type typ.
func (r *recorder) ofType(typ string) []musepi.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []musepi.Event
	for _, e := range r.events {
		if e.Type() == typ {
			out = append(out, e)
		}
	}
	return out
}

// describe renders history or runtime-context entries as lines.
func describe(entries []musepi.Entry) []string {
	var out []string
	for _, e := range entries {
		switch {
		case e.User != nil:
			out = append(out, "user "+e.User.Text)
		case e.Assistant != nil:
			a := e.Assistant
			if a.ErrorMessage != "" {
				out = append(out, fmt.Sprintf("assistant %s error=%q", a.StopReason, a.ErrorMessage))
			} else {
				out = append(out, fmt.Sprintf("assistant %s %q", a.StopReason, a.Text()))
			}
		case e.ModelChange != nil:
			m := e.ModelChange
			out = append(out, fmt.Sprintf("model_change %s -> %s (%s)", m.From, m.To, m.Reason))
		case e.ToolResult != nil:
			out = append(out, "tool_result "+e.ToolResult.Name)
		default:
			out = append(out, "unknown entry")
		}
	}
	return out
}

func history(t *testing.T, s *musepi.Session) []musepi.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entries, err := s.History(ctx)
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	return entries
}

func runtimeContext(t *testing.T, s *musepi.Session) []musepi.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entries, err := s.Messages(ctx)
	if err != nil {
		t.Fatalf("Messages: %v", err)
	}
	return entries
}

// apiKeys lists the API key of every call a provider received.
func apiKeys(p *provider.Scripted) []string {
	var out []string
	for _, c := range p.Calls() {
		out = append(out, c.APIKey)
	}
	return out
}

// models lists the model of every call a provider received.
func models(p *provider.Scripted) []string {
	var out []string
	for _, c := range p.Calls() {
		out = append(out, c.Model)
	}
	return out
}

func expectCalls(t *testing.T, name string, p *provider.Scripted, want int) {
	t.Helper()
	if got := len(p.Calls()); got != want {
		t.Fatalf("provider %s got %d calls, want %d", name, got, want)
	}
}

// notRetried is the event script of a failed prompt that started no chain.
var notRetried = []string{"agent_end willRetry=false", "agent_settled success=false"}

// oneRetryScript is the event script of one retry of class with delay that succeeded.
func oneRetryScript(delayMs int, class string) []string {
	return []string{
		"agent_end willRetry=true",
		fmt.Sprintf("auto_retry_start 1/10 delay=%dms class=%s", delayMs, class),
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true",
	}
}

const fallbackModel = "q/m2"

// ------------------------------------------------ classes that are retried

func TestTransientErrorsRetried(t *testing.T) {
	cases := []struct {
		name string
		out  provider.Outcome
	}{
		{"429", fail(429, "429 Too Many Requests")},
		{"429 rate_limit_error", fail(429, `{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited"}}`)},
		{"500", fail(500, "500 Internal Server Error")},
		{"502", fail(502, "502 Bad Gateway")},
		{"503", fail(503, "503 Service Unavailable")},
		{"504", fail(504, "504 Gateway Timeout")},
		{"529 overloaded", fail(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)},
		{"status in text only", fail(0, "upstream answered 503")},
		{"connection reset", fail(0, "read tcp 10.0.0.2:51234->10.0.0.1:443: read: connection reset by peer")},
		{"ECONNRESET", fail(0, "request failed: ECONNRESET")},
		{"unexpected EOF", fail(0, "unexpected EOF")},
		{"dns", fail(0, "dial tcp: lookup api.example.com: no such host")},
		{"i/o timeout", fail(0, "dial tcp 10.0.0.1:443: i/o timeout")},
		{"fetch failed", fail(0, "TypeError: fetch failed")},
		{"envelope before message_start", fail(0, "stream error before message_start: unexpected end")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, musepi.WithRetrySettings(noFallback()))
			s, rec := h.session()
			h.p.SetScript(s.ID(), c.out, answer("hello"))
			r := h.runPrompt(s, "hi")
			expectAnswer(t, r, "hello")
			expectLines(t, rec.lines(retryEvents...), oneRetryScript(500, "transient")...)
			expectCalls(t, "p", h.p, 2)
			start := rec.ofType("auto_retry_start")[0].(musepi.AutoRetryStart)
			if start.ErrorMessage != c.out.Message.GetErrorMessage() {
				t.Fatalf("auto_retry_start.errorMessage = %q, want %q", start.ErrorMessage, c.out.Message.GetErrorMessage())
			}
		})
	}
}

func TestUsageLimitRetried(t *testing.T) {
	t.Run("with hint", func(t *testing.T) {
		h := newHarness(t, musepi.WithRetrySettings(noFallback()))
		s, rec := h.session()
		h.p.SetScript(s.ID(), fail(429, "usage_limit_reached: You have hit your usage limit", "retry-after", "2"), answer("hello"))
		r := h.runPrompt(s, "hi")
		expectAnswer(t, r, "hello")
		expectLines(t, rec.lines(retryEvents...), oneRetryScript(2000, "usage_limit")...)
		expectCalls(t, "p", h.p, 2)
	})
	// With defaults, a usage limit with no second credential and no hint
	// waits the quota estimate (30 min) > maxDelayMs and fails fast.
	t.Run("no hint, no sibling: fail fast", func(t *testing.T) {
		h := newHarness(t, musepi.WithRetrySettings(noFallback()))
		s, rec := h.session()
		h.p.SetScript(s.ID(), fail(429, "You have hit your usage limit"), answer("hello"))
		r := h.runPrompt(s, "hi")
		expectErr(t, r, musepi.ErrPromptFailed)
		expectLines(t, rec.lines(retryEvents...),
			"agent_end willRetry=false",
			`auto_retry_end success=false attempt=1 error="provider asked for 1800000 ms, more than retry.maxDelayMs (300000 ms): You have hit your usage limit"`,
			"agent_settled success=false",
		)
		expectCalls(t, "p", h.p, 1)
	})
}

func TestStaleReplayRetriedAfterResetSession(t *testing.T) {
	for _, text := range []string{
		"Item with id 'rs_6789abcdef' not found.",
		"Invalid 'previous_response_id': response has expired",
	} {
		t.Run(text, func(t *testing.T) {
			h := newHarness(t, musepi.WithRetrySettings(noFallback()))
			s, rec := h.session()
			h.p.SetScript(s.ID(), fail(400, text), answer("hello"))
			r := h.runPrompt(s, "hi")
			expectAnswer(t, r, "hello")
			expectLines(t, rec.lines(retryEvents...), oneRetryScript(0, "stale_replay")...)
			if n := h.p.Resets(s.ID()); n != 1 {
				t.Fatalf("provider session resets = %d, want 1", n)
			}
			expectCalls(t, "p", h.p, 2)
		})
	}
}

// A classifier refusal (OpenAI content_filter → stop_details "sensitive") is
// retried on the fallback model; the typed field decides, not the text.
func TestClassifierRefusalRetried(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, rec := h.session()
	h.p.SetScript(s.ID(), refusal("sensitive", "Output withheld by the content filter"), answer("from p"))
	h.other.SetScript(s.ID(), answer("from q"))
	r := h.runPrompt(s, "hi")
	expectAnswer(t, r, "from q")
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"model_change p/m -> q/m2 (fallback)",
		"retry_fallback_applied p/m -> q/m2 (default)",
		"auto_retry_start 1/10 delay=0ms class=classifier_refusal",
		"agent_end willRetry=false",
		"retry_fallback_succeeded q/m2 (default)",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true",
	)
	expectCalls(t, "p", h.p, 1)
	expectCalls(t, "q", h.other, 1)
}

func TestReasonlessAbortRetried(t *testing.T) {
	for _, reason := range []messages.StopReason{messages.StopReason_STOP_REASON_ABORTED, messages.StopReason_STOP_REASON_ERROR} {
		t.Run(reason.String(), func(t *testing.T) {
			h := newHarness(t, musepi.WithRetrySettings(noFallback()))
			s, rec := h.session()
			h.p.SetScript(s.ID(), reasonlessAbort(reason), answer("hello"))
			r := h.runPrompt(s, "hi")
			expectAnswer(t, r, "hello")
			expectLines(t, rec.lines(retryEvents...), oneRetryScript(500, "reasonless_abort")...)
			expectCalls(t, "p", h.p, 2)
		})
	}
}

// --------------------------------------------- classes that are not retried

func TestClientErrorsNotRetried(t *testing.T) {
	cases := []struct {
		name string
		out  provider.Outcome
	}{
		{"400", fail(400, `400 {"type":"invalid_request_error","message":"messages.0.content: Field required"}`)},
		{"401", fail(401, "401 Unauthorized: invalid x-api-key")},
		{"403", fail(403, "403 Forbidden: your key lacks permission for this model")},
		{"404", fail(404, "404 Not Found: model 'm' does not exist")},
		// Transient wording does not override a final client status.
		{"400 with timeout wording", fail(400, "400 Bad Request: invalid argument: timeout must be positive")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, musepi.WithRetrySettings(noFallback()))
			s, rec := h.session()
			h.p.SetScript(s.ID(), c.out, answer("hello"))
			r := h.runPrompt(s, "hi")
			expectErr(t, r, musepi.ErrPromptFailed)
			if r.msg.ErrorMessage != c.out.Message.GetErrorMessage() {
				t.Fatalf("prompt message = %q, want the provider's error", r.msg.ErrorMessage)
			}
			expectLines(t, rec.lines(retryEvents...), notRetried...)
			expectCalls(t, "p", h.p, 1)
			if s.IsRetrying() {
				t.Fatal("IsRetrying after a non-retryable error")
			}
		})
	}
}

func TestContentBlockedNotRetried(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(400, "Output blocked by content filtering policy"), answer("hello"))
	r := h.runPrompt(s, "hi")
	expectErr(t, r, musepi.ErrPromptFailed)
	expectLines(t, rec.lines(retryEvents...), notRetried...)
	expectCalls(t, "p", h.p, 1)
}

func TestContextOverflowRoutedToCompaction(t *testing.T) {
	for _, text := range []string{
		"prompt is too long: 213462 tokens > 200000 maximum",
		// 130500 must not read as a 500.
		"This model's maximum context length is 128000 tokens. However, your messages resulted in 130500 tokens.",
	} {
		t.Run(text, func(t *testing.T) {
			h := newHarness(t) // default settings: fallback on, still no retry
			s, rec := h.session()
			h.p.SetScript(s.ID(), fail(400, text), answer("hello"))
			r := h.runPrompt(s, "hi")
			expectErr(t, r, musepi.ErrContextOverflow)
			if errors.Is(r.err, musepi.ErrPromptFailed) {
				t.Fatalf("overflow error %v also matches ErrPromptFailed", r.err)
			}
			expectLines(t, rec.lines(retryEvents...),
				"agent_end willRetry=false",
				"compaction_required",
				"agent_settled success=false",
			)
			cr := rec.ofType("compaction_required")[0].(musepi.CompactionRequired)
			if cr.ErrorMessage != text {
				t.Fatalf("compaction_required.errorMessage = %q, want %q", cr.ErrorMessage, text)
			}
			expectCalls(t, "p", h.p, 1)
		})
	}
}

func TestPartialOutputNotRetried(t *testing.T) {
	text := func(s string) *messages.ContentBlock {
		return &messages.ContentBlock{Block: &messages.ContentBlock_Text{Text: &messages.TextBlock{Text: s}}}
	}
	cases := []struct {
		name string
		msg  *messages.AssistantMessage
	}{
		{"stream_interrupted_after_content", &messages.AssistantMessage{
			StopReason:   messages.StopReason_STOP_REASON_ERROR,
			ErrorMessage: "overloaded_error: Overloaded",
			HttpStatus:   529,
			StopDetails:  &messages.StopDetails{Type: "stream_interrupted_after_content"},
		}},
		{"text block", &messages.AssistantMessage{
			Content:      []*messages.ContentBlock{text("Hello, wor")},
			StopReason:   messages.StopReason_STOP_REASON_ERROR,
			ErrorMessage: "read: connection reset by peer",
		}},
		{"thinking block", &messages.AssistantMessage{
			Content:      []*messages.ContentBlock{{Block: &messages.ContentBlock_Thinking{Thinking: &messages.ThinkingBlock{}}}},
			StopReason:   messages.StopReason_STOP_REASON_ERROR,
			ErrorMessage: "503 Service Unavailable",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, musepi.WithRetrySettings(noFallback()))
			s, rec := h.session()
			h.p.SetScript(s.ID(), provider.Outcome{Deltas: []provider.Delta{{Kind: "text", Text: "Hello, wor"}}, Message: c.msg}, answer("hello"))
			r := h.runPrompt(s, "hi")
			expectErr(t, r, musepi.ErrPromptFailed)
			expectLines(t, rec.lines(retryEvents...), notRetried...)
			expectCalls(t, "p", h.p, 1)
		})
	}
}

// ------------------------------------------------------ backoff and hints

func TestBackoffDelays(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	e := fail(503, "503 Service Unavailable")
	h.p.SetScript(s.ID(), e, e, e, e, e, e, answer("hello"))
	r := h.runPrompt(s, "hi")
	expectAnswer(t, r, "hello")
	var want []string
	for i, d := range []int{500, 1000, 2000, 4000, 8000, 8000} {
		want = append(want, "agent_end willRetry=true", fmt.Sprintf("auto_retry_start %d/10 delay=%dms class=transient", i+1, d))
	}
	want = append(want, "agent_end willRetry=false", "auto_retry_end success=true attempt=6", "agent_settled success=true")
	expectLines(t, rec.lines(retryEvents...), want...)
	// The virtual time the prompt took is the sum of the sleeps plus the
	// scheduler's 1 ms per continue.
	if got, want := h.clk.Now().Sub(start), 23500*time.Millisecond+6*time.Millisecond; got != want {
		t.Fatalf("prompt took %v of virtual time, want %v", got, want)
	}
}

func TestRetryAfterHintExtendsBackoff(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(429, "429 Too Many Requests", "retry-after", "3"), answer("hello"))
	r := h.runPrompt(s, "hi")
	expectAnswer(t, r, "hello")
	expectLines(t, rec.lines(retryEvents...), oneRetryScript(3000, "transient")...)
}

func TestMaxDelayFailFast(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(429, "429 Too Many Requests", "retry-after", "600"), answer("hello"))
	r := h.runPrompt(s, "hi")
	expectErr(t, r, musepi.ErrPromptFailed)
	if !strings.Contains(r.err.Error(), "more than retry.maxDelayMs") {
		t.Fatalf("prompt error %q does not mention retry.maxDelayMs", r.err)
	}
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=false",
		`auto_retry_end success=false attempt=1 error="provider asked for 600000 ms, more than retry.maxDelayMs (300000 ms): 429 Too Many Requests"`,
		"agent_settled success=false",
	)
	if n := rec.count("auto_retry_start"); n != 0 {
		t.Fatalf("%d auto_retry_start events, want none", n)
	}
	expectCalls(t, "p", h.p, 1)
	if got := h.clk.Now(); !got.Equal(start) {
		t.Fatalf("fail-fast slept until %v", got)
	}
}

func TestMaxRetriesExceededReportsLastAttempt(t *testing.T) {
	settings := noFallback()
	settings.MaxRetries = 3
	h := newHarness(t, musepi.WithRetrySettings(settings))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable")) // repeats forever
	r := h.runPrompt(s, "hi")
	expectErr(t, r, musepi.ErrPromptFailed)
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"auto_retry_start 1/3 delay=500ms class=transient",
		"agent_end willRetry=true",
		"auto_retry_start 2/3 delay=1000ms class=transient",
		"agent_end willRetry=true",
		"auto_retry_start 3/3 delay=2000ms class=transient",
		"agent_end willRetry=false",
		`auto_retry_end success=false attempt=3 error="503 Service Unavailable"`,
		"agent_settled success=false",
	)
	expectCalls(t, "p", h.p, 4)
}

// ----------------------------------------------------------- chain ending

func TestSuccessEndsChain(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(502, "502 Bad Gateway"), answer("hello"))
	ch := h.prompt(s, "hi")
	h.advance(100 * time.Millisecond)
	if !s.IsRetrying() {
		t.Fatal("IsRetrying false during the backoff")
	}
	h.run()
	r := h.settle(ch)
	expectAnswer(t, r, "hello")
	expectLines(t, rec.lines(retryEvents...), oneRetryScript(500, "transient")...)
	end := rec.ofType("auto_retry_end")[0].(musepi.AutoRetryEnd)
	if end.FinalError != "" || end.Wire().GetAutoRetryEnd().FinalError != nil {
		t.Fatalf("successful auto_retry_end carries finalError %q", end.FinalError)
	}
	if s.IsRetrying() || s.Busy() {
		t.Fatalf("after success: IsRetrying=%t Busy=%t", s.IsRetrying(), s.Busy())
	}
}

func TestNewChainAfterReset(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	e := fail(503, "503 Service Unavailable")
	h.p.SetScript(s.ID(), e, e, answer("first"), e, answer("second"))
	expectAnswer(t, h.runPrompt(s, "one"), "first")
	expectAnswer(t, h.runPrompt(s, "two"), "second")
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"agent_end willRetry=true",
		"auto_retry_start 2/10 delay=1000ms class=transient",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=2",
		"agent_settled success=true",
		// The second prompt's chain starts again from attempt 1.
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true",
	)
}

// ------------------------------------------------------------ credentials

// newCredHarness is a harness whose provider "p" has credentials: a later
// WithProvider for the same name overrides the one newHarness registers.

var twoKeys = []musepi.Credential{{Name: "a", APIKey: "ka"}, {Name: "b", APIKey: "kb"}}

// A usage limit on one key switches to its free sibling and retries at once,
// in preference to a model fallback.
func TestCredentialSwitchRetriesAtOnce(t *testing.T) {
	h := newHarnessCreds(t, twoKeys, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(429, "usage_limit_reached: You have hit your usage limit"), answer("hello"))
	r := h.runPrompt(s, "hi")
	expectAnswer(t, r, "hello")
	expectLines(t, rec.lines(retryEvents...), oneRetryScript(0, "usage_limit")...)
	if got := strings.Join(apiKeys(h.p), ","); got != "ka,kb" {
		t.Fatalf("API keys used = %s, want ka,kb", got)
	}
	expectCalls(t, "q", h.other, 0)
	if s.Model() != "p/m" {
		t.Fatalf("model = %s, want p/m (no fallback after a credential switch)", s.Model())
	}
}

// Both keys limited: the first limit (hint 20 s) switches a -> b; the second
// (on b, no hint: quota estimate 30 min) finds no free sibling, so the wait
// is until a frees up plus 1 s. a is blocked until start+20s; the second
// failure happens at start+1ms (the scheduled continue's 1 ms), so the
// delay is 20 s - 1 ms + 1 s = 20999 ms, and the next attempt picks up a.
func TestSiblingCredentialUnblockWait(t *testing.T) {
	h := newHarnessCreds(t, twoKeys, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(),
		fail(429, "You have hit your usage limit; retry-after: 20"),
		fail(429, "You have hit your usage limit"),
		answer("hello"))
	r := h.runPrompt(s, "hi")
	expectAnswer(t, r, "hello")
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=0ms class=usage_limit",
		"agent_end willRetry=true",
		"auto_retry_start 2/10 delay=20999ms class=usage_limit",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=2",
		"agent_settled success=true",
	)
	if got := strings.Join(apiKeys(h.p), ","); got != "ka,kb,ka" {
		t.Fatalf("API keys used = %s, want ka,kb,ka (the retry after the wait uses the freed sibling)", got)
	}
}

// A retry keeps its key only while no one has blocked it: here y waits in
// a 503 backoff on key a while x meets a usage limit on a, so y's retry
// goes out on b without first calling with a.
func TestRetryLeavesAKeyBlockedElsewhere(t *testing.T) {
	h := newHarnessCreds(t, twoKeys, musepi.WithRetrySettings(noFallback()))
	y, _ := h.session()
	z, _ := h.session()
	x, _ := h.session()
	h.p.SetScript(y.ID(), fail(503, "503 Service Unavailable"), answer("y"))
	h.p.SetScript(z.ID(), answer("z"))
	h.p.SetScript(x.ID(), fail(429, "You have hit your usage limit; retry-after: 20"), answer("x"))
	keysOf := func(s *musepi.Session) string {
		var out []string
		for _, c := range h.p.Calls() {
			if c.SessionID == s.ID() {
				out = append(out, c.APIKey)
			}
		}
		return strings.Join(out, ",")
	}
	ry := h.prompt(y, "hi") // key a (round-robin), then backoff 500 ms
	h.advance(0)
	expectAnswer(t, h.settle(h.prompt(z, "hi")), "z") // key b
	h.advance(0)
	rx := h.prompt(x, "hi") // key a again: the usage limit blocks a, x goes on with b
	h.run()
	expectAnswer(t, h.settle(rx), "x")
	expectAnswer(t, h.settle(ry), "y")
	if got := keysOf(x); got != "ka,kb" {
		t.Fatalf("x used %s, want ka,kb", got)
	}
	if got := keysOf(y); got != "ka,kb" {
		t.Fatalf("y used %s, want ka,kb (its retry must leave the key x found limited)", got)
	}
}

func TestAutoRedeemOnlyWhenOptedIn(t *testing.T) {
	banked := []musepi.Credential{{Name: "a", APIKey: "ka", BankedResets: 1}}
	limit := fail(429, "You have hit your usage limit")
	failFast := []string{
		"agent_end willRetry=false",
		`auto_retry_end success=false attempt=1 error="provider asked for 1800000 ms, more than retry.maxDelayMs (300000 ms): You have hit your usage limit"`,
		"agent_settled success=false",
	}
	t.Run("off", func(t *testing.T) {
		h := newHarnessCreds(t, banked, musepi.WithRetrySettings(noFallback()))
		s, rec := h.session()
		h.p.SetScript(s.ID(), limit, answer("hello"))
		r := h.runPrompt(s, "hi")
		expectErr(t, r, musepi.ErrPromptFailed)
		expectLines(t, rec.lines(retryEvents...), failFast...)
		expectCalls(t, "p", h.p, 1)
	})
	t.Run("on", func(t *testing.T) {
		h := newHarnessCreds(t, banked, musepi.WithRetrySettings(noFallback()), musepi.WithAutoRedeem(true))
		s, rec := h.session()
		h.p.SetScript(s.ID(), limit, answer("hello"), limit)
		r := h.runPrompt(s, "hi")
		expectAnswer(t, r, "hello")
		expectLines(t, rec.lines(retryEvents...), oneRetryScript(0, "usage_limit")...)
		if got := strings.Join(apiKeys(h.p), ","); got != "ka,ka" {
			t.Fatalf("API keys used = %s, want ka,ka", got)
		}
		// The one banked reset is spent: the next limit fails fast.
		n := len(rec.lines(retryEvents...))
		r = h.runPrompt(s, "again")
		expectErr(t, r, musepi.ErrPromptFailed)
		expectLines(t, rec.lines(retryEvents...)[n:], failFast...)
	})
}

// -------------------------------------------------------- model fallback

var overloaded = fail(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)

var fallbackScript = []string{
	"agent_end willRetry=true",
	"model_change p/m -> q/m2 (fallback)",
	"retry_fallback_applied p/m -> q/m2 (default)",
	"auto_retry_start 1/10 delay=0ms class=transient",
	"agent_end willRetry=false",
	"retry_fallback_succeeded q/m2 (default)",
	"auto_retry_end success=true attempt=1",
	"agent_settled success=true",
}

func TestModelFallbackApplied(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, rec := h.session()
	h.p.SetScript(s.ID(), overloaded, answer("from p"))
	h.other.SetScript(s.ID(), answer("from q"))
	r := h.runPrompt(s, "hi")
	expectAnswer(t, r, "from q")
	expectLines(t, rec.lines(retryEvents...), fallbackScript...)
	if s.Model() != fallbackModel {
		t.Fatalf("model = %s, want %s", s.Model(), fallbackModel)
	}
	if got := strings.Join(models(h.other), ","); got != "m2" {
		t.Fatalf("q got models %s, want m2", got)
	}
	expectCalls(t, "p", h.p, 1)
	expectLines(t, describe(history(t, s)),
		"user hi",
		`assistant error error="{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}"`,
		"model_change p/m -> q/m2 (fallback)",
		`assistant stop "from q"`,
	)
	// The context holds neither the failed turn nor the model change.
	expectLines(t, describe(runtimeContext(t, s)), "user hi", `assistant stop "from q"`)
}

// With cooldown-expiry the primary comes back before the first prompt after
// its cooldown (capacity estimate 45 s + 30 s with the nominal source = 75 s).
func TestModelFallbackRevertsAfterCooldown(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, rec := h.session()
	h.p.SetScript(s.ID(), overloaded, answer("from p"))
	h.other.SetScript(s.ID(), answer("from q"))
	expectAnswer(t, h.runPrompt(s, "one"), "from q")
	expectLines(t, rec.lines(retryEvents...), fallbackScript...)

	// Still cooling down (now start+60.001s): stay on the fallback.
	h.advance(60 * time.Second)
	n := len(rec.lines(retryEvents...))
	expectAnswer(t, h.runPrompt(s, "two"), "from q")
	expectLines(t, rec.lines(retryEvents...)[n:], "agent_end willRetry=false", "agent_settled success=true")

	// Past the cooldown (start+75.001s): back to p/m, with no retry_fallback event.
	h.advance(15 * time.Second)
	n = len(rec.lines(retryEvents...))
	expectAnswer(t, h.runPrompt(s, "three"), "from p")
	expectLines(t, rec.lines(retryEvents...)[n:],
		"model_change q/m2 -> p/m (revert)",
		"agent_end willRetry=false",
		"agent_settled success=true",
	)
	if s.Model() != "p/m" {
		t.Fatalf("model = %s, want p/m", s.Model())
	}
	expectCalls(t, "p", h.p, 2)
	expectCalls(t, "q", h.other, 2)
	var changes []string
	for _, line := range describe(history(t, s)) {
		if strings.HasPrefix(line, "model_change") {
			changes = append(changes, line)
		}
	}
	expectLines(t, changes, "model_change p/m -> q/m2 (fallback)", "model_change q/m2 -> p/m (revert)")
}

func TestModelFallbackRevertPolicyNever(t *testing.T) {
	settings := withFallback(fallbackModel)
	settings.FallbackRevertPolicy = retry.RevertNever
	h := newHarness(t, musepi.WithRetrySettings(settings))
	s, rec := h.session()
	h.p.SetScript(s.ID(), overloaded, answer("from p"))
	h.other.SetScript(s.ID(), answer("from q"))
	expectAnswer(t, h.runPrompt(s, "one"), "from q")
	expectLines(t, rec.lines(retryEvents...), fallbackScript...)

	h.advance(10 * time.Minute)
	n := len(rec.lines(retryEvents...))
	expectAnswer(t, h.runPrompt(s, "two"), "from q")
	expectLines(t, rec.lines(retryEvents...)[n:], "agent_end willRetry=false", "agent_settled success=true")
	if s.Model() != fallbackModel {
		t.Fatalf("model = %s, want %s kept", s.Model(), fallbackModel)
	}
	expectCalls(t, "p", h.p, 1)
	expectCalls(t, "q", h.other, 2)
}

func TestRefusalWithAndWithoutFallback(t *testing.T) {
	refused := refusal("refusal", "The model declined to answer this request")
	t.Run("with fallback: applied and pinned", func(t *testing.T) {
		h := newHarness(t, musepi.WithRetrySettings(withFallback(fallbackModel)))
		s, rec := h.session()
		h.p.SetScript(s.ID(), refused, answer("from p"))
		h.other.SetScript(s.ID(), answer("from q"))
		expectAnswer(t, h.runPrompt(s, "one"), "from q")
		expectLines(t, rec.lines(retryEvents...),
			"agent_end willRetry=true",
			"model_change p/m -> q/m2 (fallback)",
			"retry_fallback_applied p/m -> q/m2 (default)",
			"auto_retry_start 1/10 delay=0ms class=classifier_refusal",
			"agent_end willRetry=false",
			"retry_fallback_succeeded q/m2 (default)",
			"auto_retry_end success=true attempt=1",
			"agent_settled success=true",
		)
		// Pinned: never reverted, however long we wait.
		h.advance(time.Hour)
		n := len(rec.lines(retryEvents...))
		expectAnswer(t, h.runPrompt(s, "two"), "from q")
		expectLines(t, rec.lines(retryEvents...)[n:], "agent_end willRetry=false", "agent_settled success=true")
		if s.Model() != fallbackModel {
			t.Fatalf("model = %s, want %s pinned", s.Model(), fallbackModel)
		}
		expectCalls(t, "p", h.p, 1)
	})
	for name, settings := range map[string]retry.Settings{
		"without fallback: no chain configured": retry.DefaultSettings(),
		"without fallback: fallback off":        func() retry.Settings { s := withFallback(fallbackModel); s.ModelFallback = false; return s }(),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, musepi.WithRetrySettings(settings))
			s, rec := h.session()
			h.p.SetScript(s.ID(), refused, answer("from p"))
			r := h.runPrompt(s, "hi")
			expectErr(t, r, musepi.ErrPromptFailed)
			// Silent end: no auto_retry_start, no auto_retry_end.
			expectLines(t, rec.lines(retryEvents...), notRetried...)
			expectCalls(t, "p", h.p, 1)
			expectCalls(t, "q", h.other, 0)
			if s.IsRetrying() {
				t.Fatal("IsRetrying after the silent end")
			}
		})
	}
}

// --------------------------------------------------------------- aborts

func TestReasonlessAbortRetriedWithoutModelFallback(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, rec := h.session()
	h.p.SetScript(s.ID(), reasonlessAbort(messages.StopReason_STOP_REASON_ABORTED), answer("from p"))
	h.other.SetScript(s.ID(), answer("from q"))
	r := h.runPrompt(s, "hi")
	expectAnswer(t, r, "from p")
	expectLines(t, rec.lines(retryEvents...), oneRetryScript(500, "reasonless_abort")...)
	expectCalls(t, "q", h.other, 0)
	if got := strings.Join(models(h.p), ","); got != "m,m" {
		t.Fatalf("p got models %s, want m,m", got)
	}
	if s.Model() != "p/m" {
		t.Fatalf("model = %s, want p/m", s.Model())
	}
}

func TestUserAbortNotRetried(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(withFallback(fallbackModel)))
	s, rec := h.session()
	h.p.SetScript(s.ID(), provider.Outcome{Block: true}, answer("hello"))
	ch := h.prompt(s, "hi")
	s.Abort() // the stream is running (it blocks until cancelled)
	h.run()
	r := h.settle(ch)
	expectErr(t, r, musepi.ErrAborted)
	expectLines(t, rec.lines(retryEvents...), notRetried...)
	if n := rec.count("auto_retry_start"); n != 0 {
		t.Fatalf("%d auto_retry_start events, want none", n)
	}
	expectCalls(t, "p", h.p, 1)
	expectCalls(t, "q", h.other, 0)
	if s.Busy() || s.IsRetrying() {
		t.Fatalf("after abort: Busy=%t IsRetrying=%t", s.Busy(), s.IsRetrying())
	}
}

var cancelledScript = []string{
	"agent_end willRetry=true",
	"auto_retry_start 1/10 delay=500ms class=transient",
	`auto_retry_end success=false attempt=1 error="Retry cancelled"`,
	"agent_settled success=false",
}

func TestAbortRetryDuringBackoff(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), answer("hello"))
	ch := h.prompt(s, "hi")
	h.advance(100 * time.Millisecond) // the 500 ms backoff is pending
	if !pending(ch) || !s.IsRetrying() {
		t.Fatal("the prompt is not waiting in the backoff")
	}
	s.AbortRetry()
	h.run()
	r := h.settle(ch)
	expectErr(t, r, musepi.ErrRetryCancelled)
	expectLines(t, rec.lines(retryEvents...), cancelledScript...)
	expectCalls(t, "p", h.p, 1)
	if s.IsRetrying() || s.Busy() {
		t.Fatalf("after AbortRetry: IsRetrying=%t Busy=%t", s.IsRetrying(), s.Busy())
	}
	if got := h.clk.Now().Sub(start); got != 100*time.Millisecond {
		t.Fatalf("the cancelled backoff still ran: virtual time %v", got)
	}
}

func TestAbortCancelsBackoffFirst(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), answer("hello"))
	ch := h.prompt(s, "hi")
	h.advance(100 * time.Millisecond)
	if !pending(ch) || !s.IsRetrying() {
		t.Fatal("the prompt is not waiting in the backoff")
	}
	s.Abort()
	h.run()
	r := h.settle(ch)
	expectErr(t, r, musepi.ErrAborted)
	expectLines(t, rec.lines(retryEvents...), cancelledScript...)
	expectCalls(t, "p", h.p, 1)
	if s.IsRetrying() || s.Busy() {
		t.Fatalf("after Abort: IsRetrying=%t Busy=%t", s.IsRetrying(), s.Busy())
	}
}

// ------------------------------------------------------------- controls

func TestSetAutoRetryEnabledFalseMidChain(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(),
		fail(503, "503 Service Unavailable (first)"),
		fail(502, "502 Bad Gateway (second)"),
		fail(503, "503 Service Unavailable (third)"),
		answer("hello"))
	ch := h.prompt(s, "one")
	if !s.AutoRetryEnabled() { // read once the session has started (see TestSessionStateReadableAtOnce)
		t.Fatal("AutoRetryEnabled false by default")
	}
	h.advance(100 * time.Millisecond) // in the backoff
	s.SetAutoRetryEnabled(false)
	h.run() // the backoff still finishes; the next error ends the chain
	r := h.settle(ch)
	expectErr(t, r, musepi.ErrPromptFailed)
	if !strings.Contains(r.err.Error(), "502 Bad Gateway (second)") {
		t.Fatalf("prompt error %q, want the second error", r.err)
	}
	if s.AutoRetryEnabled() {
		t.Fatal("AutoRetryEnabled still true")
	}
	expectLines(t, rec.lines(retryEvents...),
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"agent_end willRetry=false",
		`auto_retry_end success=false attempt=1 error="502 Bad Gateway (second)"`,
		"agent_settled success=false",
	)
	expectCalls(t, "p", h.p, 2)

	// Disabled: a new retryable error starts no chain at all.
	n := len(rec.lines(retryEvents...))
	r = h.runPrompt(s, "two")
	expectErr(t, r, musepi.ErrPromptFailed)
	expectLines(t, rec.lines(retryEvents...)[n:], notRetried...)
	expectCalls(t, "p", h.p, 3)
}

// AutoRetryEnabled and Model mirror the session's settings from the moment
// NewSession returns.
func TestSessionStateReadableAtOnce(t *testing.T) {
	h := newHarness(t)
	s, _ := h.session()
	if !s.AutoRetryEnabled() || s.Model() != "p/m" {
		t.Fatalf("right after NewSession: AutoRetryEnabled=%t Model=%q; want true, p/m", s.AutoRetryEnabled(), s.Model())
	}
}

func TestPromptWaitsForRetryChain(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), answer("hello"))
	ch := h.prompt(s, "hi")
	h.advance(499 * time.Millisecond) // less than the 500 ms backoff
	if !pending(ch) {
		t.Fatal("Prompt returned before its retry chain ended")
	}
	if !s.IsRetrying() || !s.Busy() {
		t.Fatalf("during the backoff: IsRetrying=%t Busy=%t", s.IsRetrying(), s.Busy())
	}
	expectLines(t, rec.lines(retryEvents...), "agent_end willRetry=true", "auto_retry_start 1/10 delay=500ms class=transient")
	h.run()
	expectAnswer(t, h.settle(ch), "hello")
	expectLines(t, rec.lines(retryEvents...), oneRetryScript(500, "transient")...)
	if s.IsRetrying() {
		t.Fatal("IsRetrying after the chain ended")
	}
}

// A continue scheduled for an older prompt generation cannot be reached
// through the public API: a prompt does not settle while its continue is
// scheduled, and a new prompt is rejected with ErrBusy meanwhile. What is
// reachable: ErrBusy, and a continue whose chain was cancelled (Abort in the
// 1 ms between the end of the backoff and the scheduled continue) is dropped.
func TestScheduledContinueOfStaleGenerationDropped(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), answer("hello"))
	ch := h.prompt(s, "one")
	gen := s.Generation()
	h.advance(100 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg, err := s.Prompt(ctx, "two")
	if !errors.Is(err, musepi.ErrBusy) || msg != nil {
		t.Fatalf("second prompt = %v, %v; want ErrBusy", msg, err)
	}
	if s.Generation() != gen {
		t.Fatalf("a rejected prompt moved the generation %d -> %d", gen, s.Generation())
	}

	// Land exactly at the end of the backoff (start+500ms): the sleep is
	// over and the continue is scheduled for start+501ms.
	h.advance(400 * time.Millisecond)
	if !pending(ch) || !s.IsRetrying() {
		t.Fatal("the prompt is not waiting for its scheduled continue")
	}
	s.Abort()
	h.run()
	expectErr(t, h.settle(ch), musepi.ErrAborted)
	expectLines(t, rec.lines(retryEvents...), cancelledScript...)
	expectCalls(t, "p", h.p, 1) // the continue was dropped: no second turn
	if n := rec.count("agent_start"); n != 1 {
		t.Fatalf("%d agent_start events, want 1", n)
	}

	// The next prompt runs normally.
	n := len(rec.lines(retryEvents...))
	expectAnswer(t, h.runPrompt(s, "three"), "hello")
	expectLines(t, rec.lines(retryEvents...)[n:], "agent_end willRetry=false", "agent_settled success=true")
}

// ---------------------------------------------------------------- history

func TestHistoryKeepsErrorRuntimeContextDropsIt(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, _ := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), answer("hello"))
	expectAnswer(t, h.runPrompt(s, "hi"), "hello")
	expectLines(t, describe(history(t, s)),
		"user hi",
		`assistant error error="503 Service Unavailable"`,
		`assistant stop "hello"`,
	)
	expectLines(t, describe(runtimeContext(t, s)), "user hi", `assistant stop "hello"`)
	// The retried turn was sent without the failed one.
	calls := h.p.Calls()
	expectLines(t, describe(musepi.FromWireEntries(calls[1].Context)), "user hi")
}

// Note: Session.History and Session.Messages leave the virtual clock busy
// (see TestHistoryReadBetweenPrompts), so this test reads them only after the
// last run of each runtime; the restored context is first checked
// through what the reopened session sends to the provider.
func TestHistorySurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	const id = "e2e-reopen"
	h1 := newHarness(t, musepi.WithHistoryDir(dir), musepi.WithRetrySettings(noFallback()))
	s1, _ := h1.session(musepi.WithSessionID(id))
	h1.p.SetScript(id, fail(503, "503 Service Unavailable"), answer("hello"))
	expectAnswer(t, h1.runPrompt(s1, "hi"), "hello")
	before := history(t, s1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h1.rt.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	h2 := newHarness(t, musepi.WithHistoryDir(dir), musepi.WithRetrySettings(noFallback()))
	s2, rec := h2.session(musepi.WithSessionID(id))
	// The reopened session continues from the restored context:
	// without the failed turn.
	h2.p.SetScript(id, answer("again"))
	expectAnswer(t, h2.runPrompt(s2, "more"), "again")
	expectLines(t, rec.lines(retryEvents...), "agent_end willRetry=false", "agent_settled success=true")
	expectLines(t, describe(musepi.FromWireEntries(h2.p.Calls()[0].Context)), "user hi", `assistant stop "hello"`, "user more")

	wantHistory := []string{
		"user hi",
		`assistant error error="503 Service Unavailable"`,
		`assistant stop "hello"`,
		"user more",
		`assistant stop "again"`,
	}
	after := history(t, s2)
	expectLines(t, describe(after), wantHistory...)
	if len(after) != len(before)+2 {
		t.Fatalf("history had %d entries before reopening, %d after one more prompt", len(before), len(after))
	}
	for i := range before {
		if !reflect.DeepEqual(before[i], after[i]) {
			t.Fatalf("history entry %d changed on reopening:\n  before %v\n  after  %v", i, before[i], after[i])
		}
	}
	for i, e := range after {
		if e.Seq != uint64(i+1) {
			t.Fatalf("history entry %d has seq %d, want %d", i, e.Seq, i+1)
		}
	}
	expectLines(t, describe(runtimeContext(t, s2)),
		"user hi", `assistant stop "hello"`, "user more", `assistant stop "again"`)
}

// Reading History or Messages between prompts must not disturb the session:
// the next prompt runs as usual on the virtual clock.
func TestHistoryReadBetweenPrompts(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()))
	s, rec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), answer("hello"), answer("second"))
	expectAnswer(t, h.runPrompt(s, "hi"), "hello")
	expectLines(t, describe(history(t, s)),
		"user hi",
		`assistant error error="503 Service Unavailable"`,
		`assistant stop "hello"`,
	)
	expectLines(t, describe(runtimeContext(t, s)), "user hi", `assistant stop "hello"`)
	n := len(rec.lines(retryEvents...))
	expectAnswer(t, h.runPrompt(s, "again"), "second")
	expectLines(t, rec.lines(retryEvents...)[n:], "agent_end willRetry=false", "agent_settled success=true")
	expectLines(t, describe(musepi.FromWireEntries(h.p.Calls()[2].Context)), "user hi", `assistant stop "hello"`, "user again")
}
