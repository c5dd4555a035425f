package musepi_test

import (
	"context"
	"sync"
	"testing"

	"github.com/musepi/musepi"
)

// goProvider is a custom provider on the Go types: a 503 first, then an
// answer streamed in two pieces; it keeps the requests it got.
type goProvider struct {
	mu   sync.Mutex
	reqs []musepi.ProviderRequest
}

func (p *goProvider) Stream(_ context.Context, req musepi.ProviderRequest, onDelta func(musepi.Delta)) *musepi.AssistantMessage {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	first := len(p.reqs) == 1
	p.mu.Unlock()
	if first {
		return &musepi.AssistantMessage{StopReason: musepi.StopReasonError, HTTPStatus: 503,
			ErrorMessage: "503 Service Unavailable: upstream overloaded"}
	}
	onDelta(musepi.Delta{Kind: "text", Text: "Hel"})
	onDelta(musepi.Delta{Kind: "text", Text: "lo"})
	return &musepi.AssistantMessage{StopReason: musepi.StopReasonStop, Content: []musepi.Block{musepi.TextBlock{Text: "Hello"}}}
}

func (p *goProvider) ResetSession(string) {}

// A provider written against the Go types runs in the runtime like a
// built-in one: its failure is classified and retried, its deltas stream,
// and it gets the conversation and the key as Go values.
func TestCustomProviderOnGoTypes(t *testing.T) {
	p := &goProvider{}
	h := newHarness(t, musepi.WithCustomProvider("g", p, musepi.Credential{Name: "k", APIKey: "key-k"}))
	s, rec := h.session(musepi.WithModel("g/m1"))
	expectAnswer(t, h.runPrompt(s, "hi"), "Hello")
	expectLines(t, rec.lines("auto_retry_start", "auto_retry_end"),
		"auto_retry_start 1/10 delay=500ms class=transient",
		"auto_retry_end success=true attempt=1")
	if got := rec.lines("message_update"); len(got) != 2 {
		t.Errorf("message_update events %q, want the two deltas", got)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(p.reqs))
	}
	for _, r := range p.reqs {
		if r.Model != "m1" || r.Credential != "k" || r.APIKey != "key-k" || len(r.Context) != 1 ||
			r.Context[0].User == nil || r.Context[0].User.Text != "hi" {
			t.Errorf("request %+v, want model m1, key k, the user's \"hi\" alone (the failed turn stripped)", r)
		}
	}
	if _, err := musepi.NewRuntime(musepi.WithCustomProvider("nil", nil)); err == nil {
		t.Error("WithCustomProvider with a nil provider was accepted")
	}
}
