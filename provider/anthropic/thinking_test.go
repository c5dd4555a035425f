package anthropic

import (
	"net/http"
	"testing"

	"github.com/musepi/musepi/provider"
)

// The session's thinking level is extended thinking with pi's budgets;
// max_tokens grows past a budget it does not exceed. Off keeps
// Config.ThinkingBudget (0: no thinking).
func TestThinkingLevelIsBudget(t *testing.T) {
	cases := []struct {
		level     provider.ThinkingLevel
		cfgBudget int64
		budget    any // nil: no thinking sent
		maxTokens float64
	}{
		{provider.ThinkingOff, 0, nil, 4096},
		{provider.ThinkingOff, 1500, float64(1500), 4096},
		{provider.ThinkingMinimal, 0, float64(1024), 4096},
		{provider.ThinkingLow, 0, float64(2048), 4096},
		{provider.ThinkingMedium, 0, float64(8192), 8192 + 4096},
		{provider.ThinkingHigh, 1500, float64(16384), 16384 + 4096},
		{provider.ThinkingXHigh, 0, float64(16384), 16384 + 4096},
	}
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		writeEvents(w, textStream("end_turn", "ok")...)
	})
	for _, c := range cases {
		p := newProvider(t, s.URL, Config{ThinkingBudget: c.cfgBudget})
		req := userRequest("think")
		req.Thinking = c.level
		stream(t, p, req)
		body := s.lastBody(t)
		th, _ := body["thinking"].(map[string]any)
		if th["budget_tokens"] != c.budget || body["max_tokens"] != c.maxTokens {
			t.Errorf("level %q (config %d): thinking %v, max_tokens %v; want budget %v, max_tokens %v",
				c.level, c.cfgBudget, body["thinking"], body["max_tokens"], c.budget, c.maxTokens)
		}
	}
}

// Usage: input counts from message_start, output from message_delta; the
// response model is message_start's.
func TestUsage(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request, _ *testServer) {
		writeEvents(w, textStream("end_turn", "ok")...)
	})
	msg, _ := stream(t, newProvider(t, s.URL, Config{}), userRequest("count"))
	if u := msg.GetUsage(); u.GetInput() != 12 || u.GetOutput() != 15 {
		t.Errorf("usage = %v, want input 12, output 15", u)
	}
	if msg.GetResponseModel() != "claude-test" {
		t.Errorf("response model %q, want message_start's claude-test", msg.GetResponseModel())
	}
}
