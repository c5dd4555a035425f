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
	var deltas deltaLog
	m := runStream(ctx, t, p, req, tr, &deltas)
	if testing.Verbose() {
		t.Logf("status %d: stop %v, http %d, details %q, error %q, %d blocks",
			tr.Status, m.GetStopReason(), m.GetHttpStatus(), m.GetStopDetails().GetType(), m.GetErrorMessage(), len(m.GetContent()))
	}
	checkMessage(t, m, wantProvider, req.Model)
	deltas.checkKinds(t)
	checkRequests(t, tr, wantPath)
	return m
}

// deltaLog collects the deltas of a Stream call, which may come from
// another goroutine.
type deltaLog struct {
	mu     sync.Mutex
	deltas []provider.Delta
}

// add records d.
func (l *deltaLog) add(d provider.Delta) {
	l.mu.Lock()
	l.deltas = append(l.deltas, d)
	l.mu.Unlock()
}

// checkKinds reports every delta whose kind is not text, thinking or
// tool_call.
func (l *deltaLog) checkKinds(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	for _, d := range l.deltas {
		switch d.Kind {
		case "text", "thinking", "tool_call":
		default:
			t.Errorf("delta kind %q", d.Kind)
		}
	}
	l.mu.Unlock()
}

// runStream runs p.Stream of req under ctx, recording its deltas in
// deltas, and returns its message; it fails t unless Stream returns a
// message before ctx expires.
func runStream(ctx context.Context, t testing.TB, p provider.Provider, req provider.Request, tr *CannedTransport, deltas *deltaLog) *messages.AssistantMessage {
	t.Helper()
	done := make(chan *messages.AssistantMessage, 1)
	go func() {
		done <- p.Stream(ctx, req, deltas.add)
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
	return m
}

// checkMessage checks m: a stop reason other than ABORTED, an error
// message with ERROR, no recovered panic, wantProvider and wantModel
// named, and storable.
func checkMessage(t testing.TB, m *messages.AssistantMessage, wantProvider, wantModel string) {
	t.Helper()
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
	if m.GetProvider() != wantProvider || m.GetModel() != wantModel {
		t.Errorf("provider/model = %q/%q, want %q/%q", m.GetProvider(), m.GetModel(), wantProvider, wantModel)
	}
	// The session stores every message in its history as protojson, which
	// (like proto.Marshal) rejects strings that are not valid UTF-8.
	if _, err := protojson.Marshal(m); err != nil {
		t.Fatalf("message cannot be stored: %v", err)
	}
}

// checkRequests checks that tr got exactly one request, to wantPath, and
// that its response body was closed.
func checkRequests(t testing.TB, tr *CannedTransport, wantPath string) {
	t.Helper()
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
}
