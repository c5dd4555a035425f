package fakellm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testServer is a started server and a client for it.
type testServer struct {
	t      *testing.T
	srv    *Server
	base   string
	client *http.Client
}

func mustParse(t *testing.T, doc string) *Scenario {
	t.Helper()
	sc, err := ParseScenario([]byte(doc))
	if err != nil {
		t.Fatalf("ParseScenario: %v\n%s", err, doc)
	}
	return sc
}

// start serves sc on a loopback port until the test ends.
func start(t *testing.T, sc *Scenario) *testServer {
	t.Helper()
	srv := New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	ts := &testServer{t: t, srv: srv, base: base, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		closed := make(chan error, 1)
		go func() { closed <- srv.Close() }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Errorf("Server.Close did not return within 5 s")
		}
	})
	return ts
}

func startJSON(t *testing.T, doc string) *testServer {
	t.Helper()
	return start(t, mustParse(t, doc))
}

var apis = []string{APIOpenAIChat, APIOpenAIResponses, APIAnthropic}

func apiPath(api string) string {
	switch api {
	case APIOpenAIResponses:
		return "/v1/responses"
	case APIAnthropic:
		return "/v1/messages"
	}
	return "/v1/chat/completions"
}

// req describes one API call.
type req struct {
	api    string
	key    string
	model  string
	stream bool
	prev   string         // Responses previous_response_id
	extra  map[string]any // more body fields
}

func (r req) body() []byte {
	b := map[string]any{"model": r.model}
	if r.stream {
		b["stream"] = true
	}
	switch r.api {
	case APIOpenAIResponses:
		b["input"] = "hi"
		if r.prev != "" {
			b["previous_response_id"] = r.prev
		}
	case APIAnthropic:
		b["max_tokens"] = 1024
		b["messages"] = []any{map[string]any{"role": "user", "content": "hi"}}
	default:
		b["messages"] = []any{map[string]any{"role": "user", "content": "hi"}}
	}
	for k, v := range r.extra {
		b[k] = v
	}
	out, _ := json.Marshal(b)
	return out
}

func (r req) httpRequest(t *testing.T, base string) *http.Request {
	t.Helper()
	hr, err := http.NewRequest(http.MethodPost, base+apiPath(r.api), bytes.NewReader(r.body()))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	key := r.key
	if key == "" {
		key = "test-key"
	}
	if r.api == APIAnthropic {
		hr.Header.Set("x-api-key", key)
		hr.Header.Set("anthropic-version", "2023-06-01")
	} else {
		hr.Header.Set("Authorization", "Bearer "+key)
	}
	return hr
}

// do sends r and returns the response (body open).
func (ts *testServer) do(r req) *http.Response {
	ts.t.Helper()
	if r.model == "" {
		r.model = "m"
	}
	resp, err := ts.client.Do(r.httpRequest(ts.t, ts.base))
	if err != nil {
		ts.t.Fatalf("%s: %v", r.api, err)
	}
	return resp
}

// result is a whole answer: status, headers, body and, for SSE, the events.
type result struct {
	status  int
	header  http.Header
	body    []byte
	events  []sseEvent
	readErr error // what ended the body (nil: a clean end)
}

// call sends r and reads the whole answer.
func (ts *testServer) call(r req) result {
	ts.t.Helper()
	resp := ts.do(r)
	defer resp.Body.Close()
	res := result{status: resp.StatusCode, header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		res.events, res.readErr = readSSE(resp.Body)
	} else {
		res.body, res.readErr = io.ReadAll(resp.Body)
	}
	return res
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Event string
	Data  string
}

func (e sseEvent) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
		t.Fatalf("event %q: data is not a JSON object: %v: %s", e.Event, err, e.Data)
	}
	return m
}

// readSSE parses events until the body ends; the error is what ended it
// (nil for a clean end of body).
func readSSE(r io.Reader) ([]sseEvent, error) {
	br := bufio.NewReader(r)
	var (
		out  []sseEvent
		cur  sseEvent
		data []string
	)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return out, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				cur.Data = strings.Join(data, "\n")
				out = append(out, cur)
			}
			cur, data = sseEvent{}, nil
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// names lists the events' names (for chat, which has none: "data").
func names(evs []sseEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Event
		if out[i] == "" {
			out[i] = "data"
		}
	}
	return out
}

// str walks a decoded JSON value: str(m, "error", "type").
func str(v any, path ...any) string {
	s, _ := walk(v, path...).(string)
	return s
}

func walk(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, b)
	}
	return m
}

// chatText joins a chat stream's content deltas; finish is the last
// finish_reason seen.
func chatText(t *testing.T, evs []sseEvent) (text, finish string) {
	t.Helper()
	for _, e := range evs {
		if e.Data == "[DONE]" {
			continue
		}
		m := e.json(t)
		text += str(m, "choices", 0, "delta", "content")
		if f := str(m, "choices", 0, "finish_reason"); f != "" {
			finish = f
		}
	}
	return text, finish
}

// deltas collects the field of the events named name.
func deltas(t *testing.T, evs []sseEvent, name string, path ...any) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		if e.Event == name {
			out = append(out, str(e.json(t), path...))
		}
	}
	return out
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got: %q\nwant: %q", what, got, want)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func nopCloser(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return b
}

// testClock is a clock for Server.SetClock that moves only when told.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

// Now is the clock's time (the func handed to SetClock).
func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
