package providertest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// Stream runs one p.Stream call of req against the canned transport tr and
// checks what every outcome must meet, whatever tr answers: Stream returns
// promptly (within its 5 s context), never nil, never a recovered panic
// ("internal error"), never ABORTED without a cancellation; ERROR carries
// a message; the message names wantProvider and req.Model and can be
// stored (valid UTF-8); deltas are text, thinking or tool_call; exactly one
// request went to wantPath (SDK retries off) and its body was closed.
func Stream(t testing.TB, p provider.Provider, req provider.Request, tr *CannedTransport, wantProvider, wantPath string) *messages.AssistantMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var (
		mu     sync.Mutex
		deltas []provider.Delta
	)
	done := make(chan *messages.AssistantMessage, 1)
	go func() {
		done <- p.Stream(ctx, req, func(d provider.Delta) {
			mu.Lock()
			deltas = append(deltas, d)
			mu.Unlock()
		})
	}()
	var m *messages.AssistantMessage
	select {
	case m = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Stream did not return within 10 s (status %d, body %q)", tr.Status, tr.Body)
	}
	if ctx.Err() != nil {
		t.Fatalf("Stream ran until its 5 s context expired on an in-memory body (status %d, body %q)", tr.Status, tr.Body)
	}
	if m == nil {
		t.Fatal("Stream returned nil")
	}
	if testing.Verbose() {
		t.Logf("status %d: stop %v, http %d, details %q, error %q, %d blocks",
			tr.Status, m.GetStopReason(), m.GetHttpStatus(), m.GetStopDetails().GetType(), m.GetErrorMessage(), len(m.GetContent()))
	}
	switch m.GetStopReason() {
	case messages.StopReason_STOP_REASON_STOP, messages.StopReason_STOP_REASON_TOOL_USE,
		messages.StopReason_STOP_REASON_LENGTH, messages.StopReason_STOP_REASON_ERROR:
	case messages.StopReason_STOP_REASON_ABORTED:
		t.Fatalf("ABORTED without a cancellation (error %q)", m.GetErrorMessage())
	default:
		t.Fatalf("stop reason %v", m.GetStopReason())
	}
	if m.GetStopReason() == messages.StopReason_STOP_REASON_ERROR && m.GetErrorMessage() == "" {
		t.Fatalf("ERROR without an error message: %v", m)
	}
	if strings.Contains(m.GetErrorMessage(), "internal error") {
		t.Fatalf("the provider recovered from a panic: %q", m.GetErrorMessage())
	}
	if m.GetProvider() != wantProvider || m.GetModel() != req.Model {
		t.Errorf("provider/model = %q/%q, want %q/%q", m.GetProvider(), m.GetModel(), wantProvider, req.Model)
	}
	// The session stores every message in its history as protojson, which
	// (like proto.Marshal) rejects strings that are not valid UTF-8.
	if _, err := protojson.Marshal(m); err != nil {
		t.Fatalf("message cannot be stored: %v", err)
	}
	mu.Lock()
	for _, d := range deltas {
		switch d.Kind {
		case "text", "thinking", "tool_call":
		default:
			t.Errorf("delta kind %q", d.Kind)
		}
	}
	mu.Unlock()
	paths := tr.Paths()
	if len(paths) != 1 {
		t.Errorf("%d requests, want 1 (SDK retries must be off)", len(paths))
	}
	for _, path := range paths {
		if path != wantPath {
			t.Errorf("request path %q, want %q", path, wantPath)
		}
	}
	if !tr.BodiesClosed() {
		t.Errorf("response body not closed")
	}
	return m
}
