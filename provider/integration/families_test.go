package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/retry"
)

// statusStreamed is the expected HttpStatus of a failure found inside an
// HTTP 200 stream: the providers report it as 0 or 200.
const statusStreamed = -1

// family is one error family of the retry policy's classification (spec
// section 2), served by a fakellm rule matched on the model name.
type family struct {
	name    string
	only    []string // provider kinds it applies to (all when empty)
	respond fakellm.Respond
	// headers computed at run time (HTTP dates).
	dynHeaders func(now time.Time) map[string]string

	class  retry.Class
	status int // expected HttpStatus (statusStreamed: 0 or 200)
	// anthropicStatus overrides status for the Anthropic provider.
	anthropicStatus int
	// hint is the expected retry hint; zero means none. hintSlack allows
	// [hint-hintSlack, hint] (HTTP dates are whole seconds).
	hint       time.Duration
	hintSlack  time.Duration
	hintSource string
	// stop is the expected StopDetails type ("" for none); anthropicStop
	// overrides it for Anthropic.
	stop, anthropicStop string
	// textIn must appear in the error message (case-insensitive).
	textIn string

	prime         bool // run a successful call first, then a chained one (stale replay)
	refused       bool // point the provider at a closed port
	partial       string
	wantNoContent bool
}

func (f family) appliesTo(k kind) bool {
	if len(f.only) == 0 {
		return true
	}
	for _, n := range f.only {
		if n == k.name {
			return true
		}
	}
	return false
}

// proxyError is an in-stream error relaying text under a type and code
// that classify nothing by themselves.
func proxyError(text string) fakellm.Respond {
	return fakellm.Respond{StreamError: true, ErrorType: "proxy_error", ErrorCode: "proxy_error", Message: text}
}

func families() []family {
	rateLimit := func(headers map[string]string) fakellm.Respond {
		return fakellm.Respond{Preset: "rate_limit", Headers: headers}
	}
	const cutText = "Partial answer that never ends"
	return []family{
		{name: "rate_limit_retry_after", respond: rateLimit(map[string]string{"retry-after": "3"}),
			class: retry.Transient, status: 429, hint: 3 * time.Second, hintSource: "retry-after"},
		{name: "rate_limit_retry_after_fraction", respond: rateLimit(map[string]string{"retry-after": "1.5"}),
			class: retry.Transient, status: 429, hint: 1500 * time.Millisecond, hintSource: "retry-after"},
		{name: "rate_limit_retry_after_date", respond: rateLimit(nil),
			dynHeaders: func(now time.Time) map[string]string {
				return map[string]string{"retry-after": now.Add(10 * time.Second).UTC().Format(http.TimeFormat)}
			},
			class: retry.Transient, status: 429, hint: 10 * time.Second, hintSlack: 3 * time.Second, hintSource: "retry-after"},
		{name: "rate_limit_retry_after_ms", respond: rateLimit(map[string]string{"retry-after-ms": "250", "retry-after": "7"}),
			class: retry.Transient, status: 429, hint: 250 * time.Millisecond, hintSource: "retry-after-ms"},
		{name: "rate_limit_reset_ms", respond: rateLimit(map[string]string{"x-ratelimit-reset-ms": "1500"}),
			class: retry.Transient, status: 429, hint: 1500 * time.Millisecond, hintSource: "x-ratelimit-reset-ms"},
		{name: "rate_limit_reset_seconds", respond: rateLimit(map[string]string{"x-ratelimit-reset": "4"}),
			class: retry.Transient, status: 429, hint: 4 * time.Second, hintSource: "x-ratelimit-reset"},
		{name: "rate_limit_bad_header_falls_through", respond: rateLimit(map[string]string{"retry-after": "soon", "x-ratelimit-reset-ms": "800"}),
			class: retry.Transient, status: 429, hint: 800 * time.Millisecond, hintSource: "x-ratelimit-reset-ms"},
		{name: "rate_limit_text_hint", respond: fakellm.Respond{Status: 429, ErrorType: "rate_limit_error",
			Message: "Rate limit reached for requests. Please try again in 20s."},
			class: retry.Transient, status: 429, hint: 20 * time.Second, hintSource: "text"},
		{name: "rate_limit_no_hint", respond: rateLimit(nil), class: retry.Transient, status: 429, textIn: "rate limit"},
		{name: "server_error_500", respond: fakellm.Respond{Preset: "server_error"}, class: retry.Transient, status: 500},
		{name: "bad_gateway_502", respond: fakellm.Respond{Preset: "bad_gateway"}, class: retry.Transient, status: 502},
		{name: "unavailable_503", respond: fakellm.Respond{Preset: "unavailable"}, class: retry.Transient, status: 503},
		{name: "gateway_timeout_504", respond: fakellm.Respond{Preset: "gateway_timeout"}, class: retry.Transient, status: 504},
		{name: "overloaded", respond: fakellm.Respond{Preset: "overloaded"},
			class: retry.Transient, status: 503, anthropicStatus: 529, textIn: "overloaded"},
		{name: "quota", respond: fakellm.Respond{Preset: "quota"},
			class: retry.UsageLimit, status: 429, anthropicStatus: 402},
		{name: "usage_limit", respond: fakellm.Respond{Preset: "usage_limit"},
			class: retry.UsageLimit, status: 429, textIn: "usage limit"},
		{name: "usage_limit_with_hint", respond: fakellm.Respond{Preset: "usage_limit", Headers: map[string]string{"retry-after": "3600"}},
			class: retry.UsageLimit, status: 429, hint: time.Hour, hintSource: "retry-after"},
		{name: "context_overflow_400", respond: fakellm.Respond{Preset: "context_overflow"}, class: retry.ContextOverflow, status: 400},
		{name: "auth_401", respond: fakellm.Respond{Preset: "auth"}, class: retry.NotRetryable, status: 401},
		{name: "forbidden_403", respond: fakellm.Respond{Status: 403}, class: retry.NotRetryable, status: 403},
		{name: "stale_replay_unknown_id", only: []string{openaiResponses.name}, respond: fakellm.Respond{Preset: "stale_response"},
			class: retry.StaleReplay, status: 400, textIn: "previous_response_not_found"},
		{name: "stale_replay_forget_previous", only: []string{openaiResponses.name}, respond: fakellm.Respond{ForgetPrevious: true, Text: "Fresh answer."},
			prime: true, class: retry.StaleReplay, status: 400, textIn: "not found"},
		{name: "refusal", respond: fakellm.Respond{Refusal: "I can't help with that."},
			class: retry.ClassifierRefusal, status: 200, stop: retry.StopDetailSensitive, anthropicStop: retry.StopDetailRefusal},
		{name: "stream_error_before_first_event", respond: fakellm.Respond{StreamError: true},
			class: retry.Transient, status: statusStreamed, wantNoContent: true},
		{name: "stream_error_overloaded_before_first_event", respond: fakellm.Respond{StreamError: true, Preset: "overloaded"},
			class: retry.Transient, status: statusStreamed, textIn: "overloaded", wantNoContent: true},
		{name: "cut_after_content", respond: fakellm.Respond{Text: cutText, Chunks: 5, CutAfter: fakellm.Int(2)},
			class: retry.NotRetryable, status: statusStreamed, stop: retry.StopDetailStreamInterruptedAfterContent, partial: cutText},
		{name: "cut_before_output", respond: fakellm.Respond{Text: cutText, Chunks: 5, CutAfter: fakellm.Int(0)},
			class: retry.Transient, status: statusStreamed, wantNoContent: true},
		// Whitespace is not output (spec 2): a turn that streamed only
		// "  \n" and then broke is retried.
		{name: "whitespace_then_cut", respond: fakellm.Respond{Text: "  \n", Chunks: 1, CutAfter: fakellm.Int(1)},
			class: retry.Transient, status: statusStreamed},
		// Reasoning is output (spec 2): every API streams it as thinking,
		// Chat Completions as delta.reasoning_content.
		{name: "thinking_then_cut", respond: fakellm.Respond{Thinking: "Let me think.", Text: cutText, Chunks: 2, CutAfter: fakellm.Int(2)},
			class: retry.NotRetryable, status: statusStreamed, stop: retry.StopDetailStreamInterruptedAfterContent},
		{name: "openrouter_reasoning_then_cut", only: []string{openaiChat.name},
			respond: fakellm.Respond{Thinking: "Let me think.", ReasoningField: "reasoning", Text: cutText, Chunks: 2, CutAfter: fakellm.Int(1)},
			class:   retry.NotRetryable, status: statusStreamed, stop: retry.StopDetailStreamInterruptedAfterContent},
		// Refusals on chat completions (spec 2, provider mapping): the
		// content_filter finish is a classifier refusal even with an error
		// text on the same chunk, with a gateway's structured stop_details,
		// and after streamed thinking.
		{name: "content_filter_with_error_text", only: []string{openaiChat.name},
			respond: fakellm.Respond{Refusal: "I can't help with that.", StopError: "Content blocked by the upstream safety filter"},
			class:   retry.ClassifierRefusal, status: 200, stop: retry.StopDetailSensitive, textIn: "content blocked"},
		{name: "content_filter_with_stop_details", only: []string{openaiChat.name},
			respond: fakellm.Respond{Refusal: "I can't help with that.", StopDetails: map[string]string{
				"type": "refusal", "category": "cyber", "explanation": "The safety classifier refused this request."}},
			class: retry.ClassifierRefusal, status: 200, stop: retry.StopDetailRefusal, textIn: "safety classifier refused"},
		{name: "content_filter_after_thinking", only: []string{openaiChat.name},
			respond: fakellm.Respond{Thinking: "The user asks for something risky.", Refusal: "No."},
			class:   retry.ClassifierRefusal, status: 200, stop: retry.StopDetailSensitive},
		// Wordings of other HTTP clients and providers, relayed by a
		// proxy as an in-stream error (spec 2, transient).
		{name: "bun_socket_closed", only: []string{openaiChat.name, openaiResponses.name},
			respond: proxyError("The socket connection was closed unexpectedly. For more information, pass `verbose: true` in the second argument to fetch()"),
			class:   retry.Transient, status: statusStreamed, textIn: "socket connection was closed"},
		{name: "bedrock_try_your_request_again", only: []string{openaiChat.name, openaiResponses.name},
			respond: proxyError("The system encountered an unexpected error during processing. Try your request again."),
			class:   retry.Transient, status: statusStreamed},
		{name: "vertex_try_the_request_again", only: []string{openaiChat.name, openaiResponses.name},
			respond: proxyError("The model did not respond. Please try the request again."),
			class:   retry.Transient, status: statusStreamed},
		{name: "go_http2_goaway", only: []string{openaiChat.name, openaiResponses.name},
			respond: proxyError("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR"),
			class:   retry.Transient, status: statusStreamed},
		{name: "httpx_server_disconnected", only: []string{openaiChat.name, openaiResponses.name},
			respond: proxyError("Server disconnected without sending a response."),
			class:   retry.Transient, status: statusStreamed},
		{name: "unknown_proxy_error_is_final", only: []string{openaiChat.name, openaiResponses.name},
			respond: proxyError("The gateway rejected the request shape."),
			class:   retry.NotRetryable, status: statusStreamed},
		{name: "connection_refused", refused: true, class: retry.Transient, status: 0, textIn: "connection refused", wantNoContent: true},
	}
}

// TestErrorFamilies runs every error family of the classification against
// each real provider: the failure the provider reports must carry what the
// retry policy needs (class, hint, HTTP status, stop details).
func TestErrorFamilies(t *testing.T) {
	t.Parallel()
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			fams := families()
			now := time.Now()
			sc := &fakellm.Scenario{Default: &fakellm.Respond{Text: "Hello from fakellm"}}
			for _, f := range fams {
				if f.refused || !f.appliesTo(k) {
					continue
				}
				r := f.respond
				if f.dynHeaders != nil {
					r.Headers = f.dynHeaders(now)
				}
				sc.Rules = append(sc.Rules, fakellm.Rule{Name: f.name, Match: fakellm.Match{API: k.api, Model: f.name}, Respond: r})
			}
			srv := startServer(t, sc)
			p, _ := newProvider(t, k, srv.base, 10*time.Second)
			refusedP, _ := newProvider(t, k, closedPortURL(t), 10*time.Second)

			for _, f := range fams {
				if !f.appliesTo(k) {
					continue
				}
				t.Run(f.name, func(t *testing.T) {
					prov := p
					if f.refused {
						prov = refusedP
					}
					runFamily(t, k, prov, srv, f)
				})
			}
		})
	}
}

func runFamily(t *testing.T, k kind, p provider.Provider, srv *server, f family) {
	req := provider.Request{
		SessionID:  "families-" + f.name,
		Model:      f.name,
		Credential: "main",
		APIKey:     "key-main",
		Context:    []*messages.Entry{userEntry("Hello?")},
	}
	if f.prime {
		first, _ := stream(t, p, req)
		if first.GetStopReason() != messages.StopReason_STOP_REASON_STOP || textOf(first) != f.respond.Text {
			t.Fatalf("priming call: stop %v text %q error %q; want a stop with %q",
				first.GetStopReason(), textOf(first), first.GetErrorMessage(), f.respond.Text)
		}
		req.Context = append(req.Context, assistantEntry(first), userEntry("And again?"))
	}
	before := srv.Stats().Total
	msg, deltas := stream(t, p, req)
	if !f.refused {
		if got := srv.Stats().Total - before; got != 1 {
			t.Errorf("fakellm saw %d requests for one Stream, want 1 (SDK retries must be off)", got)
		}
	}

	t.Logf("status %d, error %q, stop details %q, content %q", msg.GetHttpStatus(), msg.GetErrorMessage(), msg.GetStopDetails().GetType(), textOf(msg))
	// Every case here is a failure that ends the turn in error.
	if msg.GetStopReason() != messages.StopReason_STOP_REASON_ERROR {
		t.Fatalf("stop reason %v (error %q), want ERROR", msg.GetStopReason(), msg.GetErrorMessage())
	}
	if msg.GetErrorMessage() == "" {
		t.Fatalf("empty error message")
	}
	if msg.GetModel() != f.name {
		t.Errorf("message model %q, want %q", msg.GetModel(), f.name)
	}
	if got := retry.Classify(msg, retry.AbortState{}); got != f.class {
		t.Errorf("Classify = %v, want %v (status %d, error %q, stop details %q)",
			got, f.class, msg.GetHttpStatus(), msg.GetErrorMessage(), msg.GetStopDetails().GetType())
	}

	wantStatus := f.status
	if k.api == fakellm.APIAnthropic && f.anthropicStatus != 0 {
		wantStatus = f.anthropicStatus
	}
	switch got := int(msg.GetHttpStatus()); {
	case wantStatus == statusStreamed:
		if got != 0 && got != 200 {
			t.Errorf("HttpStatus %d, want 0 or 200 (a failure inside a 200 stream)", got)
		}
	case got != wantStatus:
		t.Errorf("HttpStatus %d, want %d (error %q)", got, wantStatus, msg.GetErrorMessage())
	}
	if wantStatus >= 400 && len(msg.GetHeaders()) == 0 {
		t.Errorf("no response headers kept on an HTTP %d failure", wantStatus)
	}

	hint, ok := retry.ParseHint(msg.GetHeaders(), msg.GetErrorMessage(), time.Now())
	switch {
	case f.hint == 0 && ok:
		t.Errorf("ParseHint found %v from %s, want no hint (headers %v, error %q)", hint.Delay, hint.Source, msg.GetHeaders(), msg.GetErrorMessage())
	case f.hint != 0 && !ok:
		t.Errorf("ParseHint found no hint, want %v from %s (headers %v, error %q)", f.hint, f.hintSource, msg.GetHeaders(), msg.GetErrorMessage())
	case f.hint != 0:
		if hint.Source != f.hintSource {
			t.Errorf("hint source %q, want %q", hint.Source, f.hintSource)
		}
		if hint.Delay > f.hint || hint.Delay < f.hint-f.hintSlack {
			t.Errorf("hint delay %v, want %v (slack %v)", hint.Delay, f.hint, f.hintSlack)
		}
	}

	wantStop := f.stop
	if k.api == fakellm.APIAnthropic && f.anthropicStop != "" {
		wantStop = f.anthropicStop
	}
	if got := msg.GetStopDetails().GetType(); got != wantStop {
		t.Errorf("StopDetails type %q, want %q", got, wantStop)
	}
	if f.textIn != "" && !strings.Contains(strings.ToLower(msg.GetErrorMessage()), strings.ToLower(f.textIn)) {
		t.Errorf("error %q does not mention %q", msg.GetErrorMessage(), f.textIn)
	}
	if f.wantNoContent {
		if len(msg.GetContent()) != 0 || len(deltas) != 0 {
			t.Errorf("content %v, deltas %v; want none before the failure", msg.GetContent(), deltas)
		}
	}
	if f.partial != "" {
		got := textOf(msg)
		if got == "" || got == f.partial || !strings.HasPrefix(f.partial, got) {
			t.Errorf("partial text %q, want a non-empty strict prefix of %q", got, f.partial)
		}
		var streamed strings.Builder
		for _, d := range deltas {
			if d.Kind == "text" {
				streamed.WriteString(d.Text)
			}
		}
		if streamed.String() != got {
			t.Errorf("streamed text %q, kept text %q; want the same", streamed.String(), got)
		}
		if !retry.HasObservableOutput(msg) {
			t.Errorf("HasObservableOutput = false for a turn cut after content")
		}
	}
}
