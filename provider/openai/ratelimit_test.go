package openai

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// openAILimits is the header set OpenAI sends on every response.
var openAILimits = map[string]string{
	"X-Ratelimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "59", "X-Ratelimit-Reset-Requests": "1s",
	"X-Ratelimit-Limit-Tokens": "150000", "X-Ratelimit-Remaining-Tokens": "149984", "X-Ratelimit-Reset-Tokens": "6m0s",
}

// compatibleNoLimits is what some OpenAI-compatible servers send instead.
var compatibleNoLimits = map[string]string{
	"X-Ratelimit-Limit-Requests": "-1", "X-Ratelimit-Remaining-Requests": "-1", "X-Ratelimit-Reset-Requests": "0s",
}

// firstDelta records when the first delta arrived, then holds the stream
// for a while: limits read at the end of the stream would show it.
type firstDelta struct {
	once sync.Once
	at   time.Time
}

func (f *firstDelta) on(provider.Delta) {
	f.once.Do(func() {
		f.at = time.Now()
		time.Sleep(50 * time.Millisecond)
	})
}

func TestRateLimits(t *testing.T) {
	for _, api := range []string{APIChat, APIResponses} {
		for _, tc := range []struct {
			name    string
			headers map[string]string
			answer  string // "text", "429" or "stream error"
			want    bool
		}{
			{"success", openAILimits, "text", true},
			{"http error", openAILimits, "429", true},
			{"error in the stream", openAILimits, "stream error", true},
			{"success without limits", nil, "text", false},
			{"http error without limits", nil, "429", false},
			{"minus one", compatibleNoLimits, "text", false},
		} {
			t.Run(api+"/"+tc.name, func(t *testing.T) {
				srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
					for k, v := range tc.headers {
						w.Header().Set(k, v)
					}
					answer(w, api, tc.answer)
				})
				var first firstDelta
				before := time.Now()
				m := newProvider(t, srv.URL, api, 0).Stream(bg(), request(user(1, "hi")), first.on)
				after := time.Now()
				if tc.answer == "text" {
					after = first.at // the headers came before the first delta
				}
				wantLimits(t, m, tc.want, before, after)
				if tc.answer == "429" && tc.want && m.GetHeaders()["x-ratelimit-remaining-requests"] != "59" {
					t.Errorf("raw headers of a failure: %v", m.GetHeaders())
				}
			})
		}
	}
}

// answer writes a text stream of the API, a 429 or an error in a stream.
func answer(w http.ResponseWriter, api, what string) {
	switch {
	case what == "429":
		jsonError(w, 429, "Rate limit reached", "requests", "rate_limit_exceeded")
	case what == "stream error":
		sseHeaders(w)
		sendData(w, `{"error":{"message":"boom","type":"server_error"}}`)
	case api == APIResponses:
		streamText(w, "resp_1", "Hi", " there")
	default:
		sseHeaders(w)
		sendData(w, textChunk("Hi"))
		sendData(w, textChunk(" there"))
		sendData(w, chunk(map[string]any{}, "stop"))
		sendData(w, "[DONE]")
	}
}

// wantLimits checks m's rate limits: openAILimits read between from and to
// when want is set, none otherwise.
func wantLimits(t *testing.T, m *messages.AssistantMessage, want bool, from, to time.Time) {
	t.Helper()
	rl := m.GetRateLimits()
	if !want {
		if rl != nil {
			t.Errorf("rate limits %v, want none", rl)
		}
		return
	}
	if rl.GetInputTokens() != nil || rl.GetOutputTokens() != nil {
		t.Errorf("kinds OpenAI does not send: %v", rl)
	}
	for _, c := range []struct {
		name             string
		got              *messages.RateLimit
		limit, remaining int64
		reset            time.Duration
	}{
		{"requests", rl.GetRequests(), 60, 59, time.Second},
		{"tokens", rl.GetTokens(), 150000, 149984, 6 * time.Minute},
	} {
		if c.got.Limit == nil || c.got.GetLimit() != c.limit || c.got.Remaining == nil || c.got.GetRemaining() != c.remaining {
			t.Errorf("%s: %v, want limit %d remaining %d", c.name, c.got, c.limit, c.remaining)
		}
		lo, hi := from.Add(c.reset).UnixMilli(), to.Add(c.reset).UnixMilli()+1
		if r := c.got.GetResetUnixMs(); r < lo || r > hi {
			t.Errorf("%s: reset %d, want in [%d, %d]", c.name, r, lo, hi)
		}
	}
}
