package openai

import (
	"net/http"
	"testing"

	"github.com/musepi/musepi/provider"
)

// The session's thinking level is OpenAI's reasoning effort: reasoning_effort
// on Chat Completions, reasoning.effort on Responses; xhigh is high, off
// sends none.
func TestThinkingLevelIsReasoningEffort(t *testing.T) {
	levels := []struct {
		level  provider.ThinkingLevel
		effort any // nil: not sent
	}{
		{provider.ThinkingOff, nil},
		{provider.ThinkingMinimal, "minimal"},
		{provider.ThinkingLow, "low"},
		{provider.ThinkingMedium, "medium"},
		{provider.ThinkingHigh, "high"},
		{provider.ThinkingXHigh, "high"},
	}
	for _, api := range []string{APIChat, APIResponses} {
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
			if api == APIResponses {
				streamText(w, "resp_1", "ok")
				return
			}
			sseHeaders(w)
			sendData(w, textChunk("ok"))
			sendData(w, chunk(map[string]any{}, "stop"))
			sendData(w, "[DONE]")
		})
		p := newProvider(t, srv.URL, api, 0)
		for i, l := range levels {
			req := request(user(1, "think"))
			req.Thinking = l.level
			p.ResetSession(req.SessionID)
			p.Stream(bg(), req, nil)
			body := srv.body(t, i)
			var got any
			if api == APIChat {
				got = body["reasoning_effort"]
			} else if r, ok := body["reasoning"].(map[string]any); ok {
				got = r["effort"]
			}
			if got != l.effort {
				t.Errorf("%s, level %q: effort %v, want %v", api, l.level, got, l.effort)
			}
		}
	}
}

// Usage comes from the usage chunk (Chat Completions asks for it with
// stream_options.include_usage) or the completed response; cached input
// tokens are cacheRead, the rest input. The response model is the
// chunks' model.
func TestUsage(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		sseHeaders(w)
		sendData(w, textChunk("ok"))
		sendData(w, chunk(map[string]any{}, "stop"))
		sendData(w, `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[],`+
			`"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":100}}}`)
		sendData(w, "[DONE]")
	})
	p := newProvider(t, srv.URL, APIChat, 0)
	m := p.Stream(bg(), request(user(1, "count")), nil)
	if u := m.GetUsage(); u.GetInput() != 20 || u.GetCacheRead() != 100 || u.GetOutput() != 30 {
		t.Errorf("usage = %v, want input 20, cacheRead 100, output 30", u)
	}
	if m.GetResponseModel() != "gpt-test" {
		t.Errorf("response model %q, want the chunks' gpt-test", m.GetResponseModel())
	}
	opts, _ := srv.body(t, 0)["stream_options"].(map[string]any)
	if opts["include_usage"] != true {
		t.Errorf("stream_options = %v, want include_usage", opts)
	}
}
