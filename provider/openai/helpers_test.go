package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer is an httptest server over loopback that records requests.
// Handlers that block wait on release, which is closed before the server.
type testServer struct {
	*httptest.Server
	release chan struct{}

	mu      sync.Mutex
	hits    int
	bodies  []map[string]any
	headers []http.Header
	paths   []string
}

func newServer(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, s *testServer)) *testServer {
	t.Helper()
	s := &testServer{release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		s.mu.Lock()
		s.hits++
		s.bodies = append(s.bodies, body)
		s.headers = append(s.headers, r.Header.Clone())
		s.paths = append(s.paths, r.URL.Path)
		s.mu.Unlock()
		handler(w, r, s)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.release) }) // runs first: unblocks handlers
	return s
}

func (s *testServer) hitCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

func (s *testServer) body(t *testing.T, i int) map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.bodies) {
		t.Fatalf("server saw %d requests, want request %d", len(s.bodies), i)
	}
	return s.bodies[i]
}

// newProvider returns a provider for base with its own HTTP client, whose
// idle connections are closed when the test ends.
func newProvider(t *testing.T, base, api string, timeout time.Duration) *Provider {
	t.Helper()
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	t.Cleanup(client.CloseIdleConnections)
	return New(Config{BaseURL: base, API: api, RequestTimeout: timeout, HTTPClient: client})
}

// sseHeaders starts an event stream.
func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// sendData writes one "data:" event and flushes it.
func sendData(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	w.(http.Flusher).Flush()
}

// sendEvent writes one named event (the Responses API wire format).
func sendEvent(w http.ResponseWriter, v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], b)
	w.(http.Flusher).Flush()
}

// chunk is a chat.completion.chunk with one choice.
func chunk(delta map[string]any, finish string) string {
	choice := map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": nil}
	if finish != "" {
		choice["finish_reason"] = finish
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
		"model": "gpt-test", "choices": []any{choice},
	})
	return string(b)
}

func textChunk(s string) string { return chunk(map[string]any{"content": s}, "") }

// jsonError answers with an OpenAI-style error body.
func jsonError(w http.ResponseWriter, status int, message, typ, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	e := map[string]any{"message": message, "type": typ, "param": nil, "code": nil}
	if code != "" {
		e["code"] = code
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// hijack takes over the connection and writes raw bytes, then closes it.
func hijack(t *testing.T, w http.ResponseWriter, raw string) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	_, _ = buf.WriteString(raw)
	_ = buf.Flush()
	_ = conn.Close()
}

// chunkedSSE is the start of a raw chunked event-stream response followed
// by the given events as chunks, without the terminating chunk.
func chunkedSSE(events ...string) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	for _, e := range events {
		data := "data: " + e + "\n\n"
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(data), data)
	}
	return b.String()
}

// recorder collects deltas.
type recorder struct {
	mu     sync.Mutex
	deltas []provider.Delta
}

func (r *recorder) on(d provider.Delta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deltas = append(r.deltas, d)
}

func (r *recorder) text(kind string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, d := range r.deltas {
		if d.Kind == kind {
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

func (r *recorder) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.deltas {
		if d.Kind == kind {
			n++
		}
	}
	return n
}

// Entries.

func user(seq uint64, text string) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
}

func assistant(seq uint64, msg *messages.AssistantMessage) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_Assistant{Assistant: msg}}
}

func toolResult(seq uint64, id, name, output string) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_ToolResult{ToolResult: &messages.ToolResult{ToolCallId: id, Name: name, Output: output}}}
}

func modelChange(seq uint64) *messages.Entry {
	return &messages.Entry{Seq: seq, Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{From: "a", To: "b", Reason: "fallback"}}}
}

func request(entries ...*messages.Entry) provider.Request {
	return provider.Request{SessionID: "s1", Model: "gpt-test", Credential: "main", APIKey: "sk-test", Context: entries}
}

// Assertions.

func textOf(m *messages.AssistantMessage) string {
	var b strings.Builder
	for _, c := range m.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

func callsOf(m *messages.AssistantMessage) []*messages.ToolCall {
	var out []*messages.ToolCall
	for _, c := range m.GetContent() {
		if tc := c.GetToolCall(); tc != nil {
			out = append(out, tc)
		}
	}
	return out
}

func wantStop(t *testing.T, m *messages.AssistantMessage, want messages.StopReason) {
	t.Helper()
	if m == nil {
		t.Fatal("nil message")
	}
	if m.GetStopReason() != want {
		t.Fatalf("stop reason %v, want %v (error %q, status %d)", m.GetStopReason(), want, m.GetErrorMessage(), m.GetHttpStatus())
	}
	if m.GetProvider() != "openai" || m.GetModel() != "gpt-test" {
		t.Errorf("provider/model = %q/%q", m.GetProvider(), m.GetModel())
	}
}

func wantClass(t *testing.T, m *messages.AssistantMessage, want retry.Class) {
	t.Helper()
	if got := retry.Classify(m, retry.AbortState{}); got != want {
		t.Errorf("class %v, want %v (error %q, status %d)", got, want, m.GetErrorMessage(), m.GetHttpStatus())
	}
}

func wantContains(t *testing.T, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Errorf("%q does not contain %q", text, s)
		}
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func bg() context.Context { return context.Background() }
