package anthropic

import (
	"bufio"
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

// testServer is an httptest server over loopback whose handlers can block
// until the test ends (release is closed before the server is).
type testServer struct {
	*httptest.Server
	release chan struct{}

	mu       sync.Mutex
	hits     int
	bodies   []map[string]any
	requests []*http.Request
}

// newServer starts a server running handler for every request, after
// recording the request and its JSON body.
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
		s.requests = append(s.requests, r.Clone(context.Background()))
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

func (s *testServer) lastBody(t *testing.T) map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bodies) == 0 {
		t.Fatal("server saw no request")
	}
	return s.bodies[len(s.bodies)-1]
}

func (s *testServer) lastRequest(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("server saw no request")
	}
	return s.requests[len(s.requests)-1]
}

// wait blocks until the client goes away or the test ends.
func (s *testServer) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.release:
	}
}

// newProvider returns a provider for baseURL with its own transport, whose
// idle connections are closed when the test ends.
func newProvider(t *testing.T, baseURL string, cfg Config) *Provider {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.BaseURL = baseURL
	cfg.HTTPClient = &http.Client{Transport: tr}
	return New(cfg)
}

// sse is one server-sent event in the wire format.
func sse(event, data string) string {
	return "event: " + event + "\ndata: " + data + "\n\n"
}

// Event builders for the Messages streaming protocol.

func evMessageStart() string {
	return sse("message_start", `{"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`)
}

func evPing() string { return sse("ping", `{"type": "ping"}`) }

func evBlockStart(index int, block string) string {
	return sse("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":%s}`, index, block))
}

func evTextStart(index int) string { return evBlockStart(index, `{"type":"text","text":""}`) }

func evDelta(index int, delta string) string {
	return sse("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, index, delta))
}

func evText(index int, text string) string {
	return evDelta(index, fmt.Sprintf(`{"type":"text_delta","text":%s}`, jsonString(text)))
}

func evBlockStop(index int) string {
	return sse("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, index))
}

func evMessageDelta(stopReason string) string {
	return sse("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":15}}`, stopReason))
}

func evMessageStop() string { return sse("message_stop", `{"type":"message_stop"}`) }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// textStream is a whole message streaming texts in one text block.
func textStream(stopReason string, texts ...string) []string {
	evs := []string{evMessageStart(), evTextStart(0), evPing()}
	for _, t := range texts {
		evs = append(evs, evText(0, t))
	}
	return append(evs, evBlockStop(0), evMessageDelta(stopReason), evMessageStop())
}

// writeEvents answers with an SSE stream of events, flushing each.
func writeEvents(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Request-Id", "req_test")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	for _, ev := range events {
		_, _ = io.WriteString(w, ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// writeError answers with an API error.
func writeError(w http.ResponseWriter, status int, typ, message string, headers map[string]string) {
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_err")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%s},"request_id":"req_err"}`, typ, jsonString(message))
}

// hijackAndCut writes a chunked 200 SSE response holding events, then
// closes the connection without ending the chunked body.
func hijackAndCut(t *testing.T, w http.ResponseWriter, events ...string) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	writeRawStream(buf, events...)
}

func writeRawStream(buf *bufio.ReadWriter, events ...string) {
	_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	for _, ev := range events {
		fmt.Fprintf(buf, "%x\r\n%s\r\n", len(ev), ev)
	}
	_ = buf.Flush()
}

// recorder collects deltas.
type recorder struct {
	mu     sync.Mutex
	deltas []provider.Delta
}

func (r *recorder) add(d provider.Delta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deltas = append(r.deltas, d)
}

func (r *recorder) joined(kind string) string {
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

// userRequest is a request with one user prompt.
func userRequest(text string) provider.Request {
	return provider.Request{
		SessionID: "s1",
		Model:     "claude-test",
		APIKey:    "sk-test",
		Context:   []*messages.Entry{{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}},
	}
}

// stream runs one turn with a 10 s safety timeout.
func stream(t *testing.T, p *Provider, req provider.Request) (*messages.AssistantMessage, *recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := &recorder{}
	msg := p.Stream(ctx, req, rec.add)
	if msg == nil {
		t.Fatal("Stream returned nil")
	}
	return msg, rec
}

// Assertions.

func textOf(msg *messages.AssistantMessage) string {
	var b strings.Builder
	for _, c := range msg.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

func wantStop(t *testing.T, msg *messages.AssistantMessage, want messages.StopReason) {
	t.Helper()
	if msg.GetStopReason() != want {
		t.Fatalf("stop reason = %v, want %v (error %q)", msg.GetStopReason(), want, msg.GetErrorMessage())
	}
}

func wantClass(t *testing.T, msg *messages.AssistantMessage, want retry.Class) {
	t.Helper()
	if got := retry.Classify(msg, retry.AbortState{}); got != want {
		t.Fatalf("Classify(%q, status %d, details %v) = %v, want %v", msg.GetErrorMessage(), msg.GetHttpStatus(), msg.GetStopDetails(), got, want)
	}
}

func wantStamped(t *testing.T, msg *messages.AssistantMessage, model string) {
	t.Helper()
	if msg.GetProvider() != "anthropic" || msg.GetModel() != model || msg.GetTimestampMs() == 0 {
		t.Fatalf("provider/model/timestamp = %q/%q/%d", msg.GetProvider(), msg.GetModel(), msg.GetTimestampMs())
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
	l.Close()
	return addr
}
