package bench

import (
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/retry"
	"github.com/musepi/musepi/session"
)

// half is a jitter source that always draws 0.5 (a jitter factor of 0.875).
type half struct{}

func (half) Float64() float64 { return 0.5 }

var benchNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// failedTurn is the last assistant message of a failed turn: stop reason
// error, the provider's error text, the HTTP status (0: none) and the
// response headers as name, value pairs.
func failedTurn(text string, status int, headers ...string) *messages.AssistantMessage {
	m := &messages.AssistantMessage{
		StopReason:   messages.StopReason_STOP_REASON_ERROR,
		ErrorMessage: text,
		HttpStatus:   int32(status),
	}
	if len(headers) > 0 {
		m.Headers = make(map[string]string, len(headers)/2)
		for i := 0; i+1 < len(headers); i += 2 {
			m.Headers[headers[i]] = headers[i+1]
		}
	}
	return m
}

// BenchmarkClassify: one op is one retry.Classify of the last assistant
// message of a turn, for typical provider errors and a success.
func BenchmarkClassify(b *testing.B) {
	for _, bc := range []struct {
		name string
		msg  *messages.AssistantMessage
		want retry.Class
	}{
		{"429_too_many_requests", failedTurn("429 Too Many Requests", 429, "retry-after", "3"), retry.Transient},
		{"503_service_unavailable", failedTurn("503 Service Unavailable", 503), retry.Transient},
		{"529_anthropic_overloaded", failedTurn(
			`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CTqZzAbCdEfGhJkLmNpQr"}`, 529),
			retry.Transient},
		{"usage_limit", failedTurn(
			`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_in_seconds":3600}}`, 429),
			retry.UsageLimit},
		{"connection_reset", failedTurn("read tcp 10.0.0.2:51234->104.18.33.45:443: read: connection reset by peer", 0), retry.Transient},
		{"context_overflow", failedTurn(
			`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 213462 tokens > 200000 maximum"}}`, 400),
			retry.ContextOverflow},
		{"400_not_retryable", failedTurn(
			`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 128000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-20250514"}}`, 400),
			retry.NotRetryable},
		{"success", &messages.AssistantMessage{
			StopReason: messages.StopReason_STOP_REASON_STOP,
			Content: []*messages.ContentBlock{{Block: &messages.ContentBlock_Text{
				Text: &messages.TextBlock{Text: "Done: the tests pass."}}}},
		}, retry.Success},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if got := retry.Classify(bc.msg, retry.AbortState{}); got != bc.want {
				b.Fatalf("Classify = %v, want %v", got, bc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				retry.Classify(bc.msg, retry.AbortState{})
			}
		})
	}
}

// BenchmarkCoreAttempt: one op is one retry attempt through a
// session.Core, the decision alone (no actor, no message): the failed
// turn's end, which backs off, and the backoff's end, which starts the
// next turn. Model fallback is off, the provider has no credentials and
// MaxRetries is huge, so the chain never ends.
func BenchmarkCoreAttempt(b *testing.B) {
	s := retry.DefaultSettings()
	s.ModelFallback = false
	s.MaxRetries = 1 << 30
	for _, bc := range []struct {
		name string
		msg  *messages.AssistantMessage
	}{
		{"529_overloaded", failedTurn(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529)},
		{"429_retry_after_header", failedTurn("429 Too Many Requests", 429, "retry-after", "3")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := session.New(session.Config{Model: "p/m", Role: "default", Settings: &s}, half{})
			var out session.Effects
			step := func(in session.Input) (turn, token uint64) {
				out.Reset()
				c.Step(&out, benchNow, in)
				for _, e := range out.List() {
					switch e.Kind {
					case session.StartTurn:
						turn = e.Turn
					case session.ArmTimer:
						token = e.Token
					}
				}
				return turn, token
			}
			turn, _ := step(session.Input{Kind: session.InPrompt})
			attempt := func() {
				_, token := step(session.Input{Kind: session.InTurnEnded, Turn: turn, Message: bc.msg})
				if turn, _ = step(session.Input{Kind: session.InBackoffDone, Token: token, Generation: c.Generation()}); turn == 0 {
					b.Fatalf("attempt %d started no turn (state %s)", c.Generation(), c.State())
				}
			}
			attempt() // opens the chain; the loop measures steady-state attempts
			b.ReportAllocs()
			for b.Loop() {
				attempt()
			}
		})
	}
}

// BenchmarkParseHint: one op is one retry.ParseHint of a failed response's
// headers and error text.
func BenchmarkParseHint(b *testing.B) {
	for _, bc := range []struct {
		name    string
		headers map[string]string
		text    string
		want    retry.Hint
	}{
		{"retry_after_header",
			map[string]string{"content-type": "application/json", "Retry-After": "30", "x-request-id": "req_8f3a2c"},
			"429 Too Many Requests",
			retry.Hint{Delay: 30 * time.Second, Source: "retry-after"}},
		{"text_hint",
			nil,
			"Rate limit reached for gpt-4o in organization org-AbCdEfGh on tokens per min (TPM): Limit 30000, Used 30000, Requested 1200. Please try again in 20ms.",
			retry.Hint{Delay: 20 * time.Millisecond, Source: "text"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if got, ok := retry.ParseHint(bc.headers, bc.text, benchNow); !ok || got != bc.want {
				b.Fatalf("ParseHint = %+v, %t; want %+v", got, ok, bc.want)
			}
			b.ReportAllocs()
			for b.Loop() {
				retry.ParseHint(bc.headers, bc.text, benchNow)
			}
		})
	}
}

// BenchmarkFailureText: one op is what a retry attempt reads from a failed
// turn's error text and headers, for the retry storm's error kinds (the
// texts bench/storm's provider reports): retry.Classify, retry.ParseHint and
// retry.LimitWait, as the session core calls them.
func BenchmarkFailureText(b *testing.B) {
	for _, bc := range []struct {
		name  string
		msg   *messages.AssistantMessage
		class retry.Class
		hint  bool
	}{
		{"429", failedTurn("429 Too Many Requests: Rate limit reached for requests", 429), retry.Transient, false},
		{"429_hint", failedTurn("429 Too Many Requests: Rate limit reached for requests", 429, "retry-after", "2"), retry.Transient, true},
		{"503", failedTurn("503 Service Unavailable: Service unavailable.", 503), retry.Transient, false},
		{"overload", failedTurn("503 Service Unavailable: The server is overloaded or not ready yet.", 503), retry.Transient, false},
		{"usage_limit", failedTurn("429 Too Many Requests: The usage limit has been reached", 429), retry.UsageLimit, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			text, status := bc.msg.GetErrorMessage(), int(bc.msg.GetHttpStatus())
			attempt := func() {
				if got := retry.Classify(bc.msg, retry.AbortState{}); got != bc.class {
					b.Fatalf("Classify = %v, want %v", got, bc.class)
				}
				if _, ok := retry.ParseHint(bc.msg.GetHeaders(), text, benchNow); ok != bc.hint {
					b.Fatalf("ParseHint found a hint: %t, want %t", ok, bc.hint)
				}
				retry.LimitWait(text, status, 0.5)
			}
			b.ReportAllocs()
			for b.Loop() {
				attempt()
			}
		})
	}
}
