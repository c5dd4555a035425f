package anthropic

import (
	"net/http"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
)

// anthropicLimits is the header set Anthropic sends on every response,
// resetting at reset (with and without fractional seconds).
func anthropicLimits(reset time.Time) map[string]string {
	h := map[string]string{}
	for _, k := range []struct{ kind, limit, remaining, reset string }{
		{"Requests", "50", "49", reset.Format(time.RFC3339)},
		{"Tokens", "90000", "88000", reset.Format(time.RFC3339Nano)},
		{"Input-Tokens", "80000", "79000", reset.Format(time.RFC3339)},
		{"Output-Tokens", "16000", "0", reset.Add(time.Minute).Format(time.RFC3339)},
	} {
		h["Anthropic-Ratelimit-"+k.kind+"-Limit"] = k.limit
		h["Anthropic-Ratelimit-"+k.kind+"-Remaining"] = k.remaining
		h["Anthropic-Ratelimit-"+k.kind+"-Reset"] = k.reset
	}
	return h
}

func TestRateLimits(t *testing.T) {
	reset := time.Now().Add(time.Hour).Truncate(time.Second).Add(250 * time.Millisecond)
	limits := anthropicLimits(reset)
	for _, tc := range []struct {
		name    string
		headers map[string]string
		answer  func(w http.ResponseWriter, headers map[string]string)
		status  messages.StopReason
		want    bool
	}{
		{"success", limits, textAnswer, messages.StopReason_STOP_REASON_STOP, true},
		{"http error", limits, rateLimited, messages.StopReason_STOP_REASON_ERROR, true},
		{"error event", limits, errorEvent, messages.StopReason_STOP_REASON_ERROR, true},
		{"success without limits", nil, textAnswer, messages.StopReason_STOP_REASON_STOP, false},
		{"http error without limits", nil, rateLimited, messages.StopReason_STOP_REASON_ERROR, false},
		{"unusable limits", map[string]string{
			"Anthropic-Ratelimit-Requests-Limit": "-1", "Anthropic-Ratelimit-Requests-Remaining": "many",
			"Anthropic-Ratelimit-Requests-Reset": "2020-01-01T00:00:00Z",
		}, textAnswer, messages.StopReason_STOP_REASON_STOP, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request, s *testServer) {
				tc.answer(w, tc.headers)
			})
			msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("x"))
			wantStop(t, msg, tc.status)
			wantLimits(t, msg, tc.want, reset)
			if tc.want && msg.GetHttpStatus() == 429 && msg.GetHeaders()["anthropic-ratelimit-requests-remaining"] != "49" {
				t.Errorf("raw headers of a failure: %v", msg.GetHeaders())
			}
		})
	}
}

func textAnswer(w http.ResponseWriter, headers map[string]string) {
	setHeaders(w, headers)
	writeEvents(w, textStream("end_turn", "Hello")...)
}

func rateLimited(w http.ResponseWriter, headers map[string]string) {
	writeError(w, 429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", headers)
}

func errorEvent(w http.ResponseWriter, headers map[string]string) {
	setHeaders(w, headers)
	writeEvents(w, sse("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
}

func setHeaders(w http.ResponseWriter, headers map[string]string) {
	for k, v := range headers {
		w.Header().Set(k, v)
	}
}

// wantLimits checks msg's rate limits: those of anthropicLimits(reset) when
// want is set, none otherwise.
func wantLimits(t *testing.T, msg *messages.AssistantMessage, want bool, reset time.Time) {
	t.Helper()
	rl := msg.GetRateLimits()
	if !want {
		if rl != nil {
			t.Errorf("rate limits %v, want none", rl)
		}
		return
	}
	whole, frac := reset.Truncate(time.Second).UnixMilli(), reset.UnixMilli()
	for _, c := range []struct {
		name             string
		got              *messages.RateLimit
		limit, remaining int64
		resetMs          int64
	}{
		{"requests", rl.GetRequests(), 50, 49, whole},
		{"tokens", rl.GetTokens(), 90000, 88000, frac},
		{"input tokens", rl.GetInputTokens(), 80000, 79000, whole},
		{"output tokens", rl.GetOutputTokens(), 16000, 0, whole + time.Minute.Milliseconds()},
	} {
		if c.got.Limit == nil || c.got.GetLimit() != c.limit || c.got.Remaining == nil || c.got.GetRemaining() != c.remaining || c.got.GetResetUnixMs() != c.resetMs {
			t.Errorf("%s: %v, want limit %d remaining %d reset %d", c.name, c.got, c.limit, c.remaining, c.resetMs)
		}
	}
}
