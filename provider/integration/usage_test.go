package integration

import (
	"testing"
	"time"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/fakellm"
)

// Every adapter fills the message's usage from the token counts fakellm
// streams (Chat Completions' usage chunk, the completed response,
// Anthropic's message_start and message_delta) and its response model from
// the model the response names; each says its family (gen_ai.provider.name).
func TestUsageAndResponseModel(t *testing.T) {
	t.Parallel()
	srv := startServer(t, &fakellm.Scenario{Default: &fakellm.Respond{Text: "Hello there, how are you?", Chunks: 3}})
	for _, k := range allKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			p, _ := newProvider(t, k, srv.base, 10*time.Second)
			msg, _ := stream(t, p, provider.Request{SessionID: "usage-" + k.name, Model: "model-u", Credential: "main",
				APIKey: "key-main", Context: []*messages.Entry{userEntry("Count my tokens, please.")}})
			if msg.GetStopReason() != messages.StopReason_STOP_REASON_STOP {
				t.Fatalf("stop reason %v (error %q), want STOP", msg.GetStopReason(), msg.GetErrorMessage())
			}
			u := msg.GetUsage()
			if u == nil || u.GetInput()+u.GetCacheRead()+u.GetCacheWrite() <= 0 || u.GetOutput() <= 0 {
				t.Errorf("usage %v, want the input and output tokens fakellm counted", u)
			}
			if got := msg.GetResponseModel(); got != "model-u" {
				t.Errorf("response model %q, want the model fakellm named, model-u", got)
			}
			family := "openai"
			if k == anthropicAPI {
				family = "anthropic"
			}
			if got := provider.GenAIProviderName(p); got != family {
				t.Errorf("gen_ai.provider.name %q, want %q", got, family)
			}
		})
	}
}
