package musepi

import (
	"context"
	"fmt"
	"testing"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// echo answers every turn with one delta and a text message.
type echo struct{}

func (echo) Stream(_ context.Context, _ ProviderRequest, onDelta func(Delta)) *AssistantMessage {
	onDelta(Delta{Kind: "text", Text: "ok"})
	return &AssistantMessage{Content: []Block{TextBlock{Text: "ok"}}, StopReason: StopReasonStop}
}

func (echo) ResetSession(string) {}

// BenchmarkCustomProviderTurn is what a custom provider's turn costs in
// conversions (WithCustomProvider): its context of 20 entries and its
// answer between the wire types and the Go types, with 3 tools. The
// built-in adapters, and BenchmarkRetryAttempt, pay none of it.
func BenchmarkCustomProviderTurn(b *testing.B) {
	req := provider.Request{SessionID: "s", Model: "m"}
	for i := range 20 {
		req.Context = append(req.Context, Entry{User: &UserMessage{Text: fmt.Sprint("prompt ", i)}}.Wire())
	}
	for i := range 3 {
		req.Tools = append(req.Tools, provider.ToolSpec{Name: fmt.Sprint("tool", i), SchemaJSON: `{"type":"object"}`})
	}
	p := nativeProvider{echo{}}
	var out *messages.AssistantMessage
	b.ReportAllocs()
	for b.Loop() {
		out = p.Stream(b.Context(), req, func(provider.Delta) {})
	}
	if out.GetStopReason() != messages.StopReason_STOP_REASON_STOP {
		b.Fatalf("answer %v", out)
	}
}
