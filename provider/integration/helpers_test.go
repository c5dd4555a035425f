package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/provider/anthropic"
	"github.com/musepi/musepi/provider/fakellm"
	"github.com/musepi/musepi/provider/openai"
	"github.com/musepi/musepi/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every wait of a test: a prompt, a stream, a poll.
const testTimeout = 15 * time.Second

// kind is one of the real providers under test.
type kind struct {
	name string // subtest name
	api  string // fakellm API name, for rule matching and stats
}

var (
	openaiChat      = kind{"openai-chat", fakellm.APIOpenAIChat}
	openaiResponses = kind{"openai-responses", fakellm.APIOpenAIResponses}
	anthropicAPI    = kind{"anthropic", fakellm.APIAnthropic}
	allKinds        = []kind{openaiChat, openaiResponses, anthropicAPI}
)

// server is a started fakellm server.
type server struct {
	*fakellm.Server
	base string
}

// startServer serves sc on a loopback port; it is closed when the test
// ends (after the runtimes and clients registered later).
func startServer(t *testing.T, sc *fakellm.Scenario) *server {
	t.Helper()
	if err := sc.Validate(); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done := make(chan error, 1)
		go func() { done <- srv.Close() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("fakellm Close did not return within 5 s")
		}
	})
	return &server{Server: srv, base: base}
}

// recordingTransport is an HTTP transport of the test's own that keeps
// the JSON body of every request it sends.
type recordingTransport struct {
	tr *http.Transport

	mu     sync.Mutex
	bodies []map[string]any
}

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody {
		raw, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		r.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(raw))
	}
	return r.tr.RoundTrip(req)
}

func (r *recordingTransport) CloseIdleConnections() { r.tr.CloseIdleConnections() }

// sent returns the bodies of the requests sent so far.
func (r *recordingTransport) sent() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.bodies...)
}

// newClient is an HTTP client with its own transport, whose idle
// connections are closed when the test ends.
func newClient(t *testing.T) (*http.Client, *recordingTransport) {
	t.Helper()
	rt := &recordingTransport{tr: &http.Transport{}}
	c := &http.Client{Transport: rt}
	t.Cleanup(c.CloseIdleConnections)
	return c, rt
}

// newProvider builds the real provider of kind k for a fakellm base URL
// (OpenAI clients get base+"/v1", Anthropic clients base).
func newProvider(t *testing.T, k kind, base string, timeout time.Duration) (provider.Provider, *recordingTransport) {
	t.Helper()
	client, rec := newClient(t)
	switch k.api {
	case fakellm.APIOpenAIChat:
		return openai.New(openai.Config{BaseURL: base + "/v1", API: openai.APIChat, RequestTimeout: timeout, HTTPClient: client}), rec
	case fakellm.APIOpenAIResponses:
		return openai.New(openai.Config{BaseURL: base + "/v1", API: openai.APIResponses, RequestTimeout: timeout, HTTPClient: client}), rec
	case fakellm.APIAnthropic:
		return anthropic.New(anthropic.Config{BaseURL: base, RequestTimeout: timeout, HTTPClient: client}), rec
	}
	t.Fatalf("unknown provider kind %q", k.name)
	return nil, nil
}

// closedPortURL is the base URL of a loopback port nobody listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// fastRetry is the default retry settings with small real delays.
func fastRetry() retry.Settings {
	s := retry.DefaultSettings()
	s.BaseDelay = 5 * time.Millisecond
	s.MaxRetries = 3
	s.MaxDelay = 5 * time.Minute
	s.ModelFallback = false
	return s
}

// newRuntime starts a runtime on the wall clock, shut down when the test ends.
func newRuntime(t *testing.T, opts ...musepi.Option) *musepi.Runtime {
	t.Helper()
	rt, err := musepi.NewRuntime(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("runtime shutdown: %v", err)
		}
	})
	return rt
}

// recorder keeps a session's events.
type recorder struct {
	mu     sync.Mutex
	events []musepi.Event
}

func (r *recorder) add(e musepi.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) count(typ string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Type() == typ {
			n++
		}
	}
	return n
}

// waitFor waits until n events of type typ arrived (delivery is
// asynchronous, so the last events may trail the Prompt's return).
func (r *recorder) waitFor(t *testing.T, typ string, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for r.count(typ) < n {
		if time.Now().After(deadline) {
			t.Fatalf("waited for %d %s events, have %d; events:\n  %s", n, typ, r.count(typ), strings.Join(r.lines(), "\n  "))
		}
		time.Sleep(time.Millisecond)
	}
}

// lines renders the events of the given types (all when none given).
func (r *recorder) lines(types ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := map[string]bool{}
	for _, t := range types {
		keep[t] = true
	}
	var out []string
	for _, e := range r.events {
		if len(types) > 0 && !keep[e.Type()] {
			continue
		}
		out = append(out, render(e))
	}
	return out
}

// starts returns the auto_retry_start payloads.
func (r *recorder) starts() []musepi.AutoRetryStart {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []musepi.AutoRetryStart
	for _, e := range r.events {
		if p, ok := e.(musepi.AutoRetryStart); ok {
			out = append(out, p)
		}
	}
	return out
}

func render(e musepi.Event) string {
	switch p := e.(type) {
	case musepi.AutoRetryStart:
		return fmt.Sprintf("auto_retry_start %d/%d delay=%dms class=%s", p.Attempt, p.MaxAttempts, p.Delay.Milliseconds(), p.ErrorClass)
	case musepi.AutoRetryEnd:
		s := fmt.Sprintf("auto_retry_end success=%t attempt=%d", p.Success, p.Attempt)
		if !p.Success {
			s += fmt.Sprintf(" error=%q", p.FinalError)
		}
		return s
	case musepi.AgentEnd:
		return fmt.Sprintf("agent_end willRetry=%t", p.WillRetry)
	case musepi.AgentSettled:
		return fmt.Sprintf("agent_settled success=%t", p.Success)
	case musepi.RetryFallbackApplied:
		return fmt.Sprintf("retry_fallback_applied %s -> %s (%s)", p.From, p.To, p.Role)
	case musepi.RetryFallbackSucceeded:
		return fmt.Sprintf("retry_fallback_succeeded %s (%s)", p.Model, p.Role)
	case musepi.ModelChanged:
		return fmt.Sprintf("model_change %s -> %s (%s)", p.From, p.To, p.Reason)
	}
	return e.Type()
}

// retryEventTypes are the event types the retry scripts compare.
var retryEventTypes = []string{
	"retry_fallback_applied", "auto_retry_start", "retry_fallback_succeeded", "auto_retry_end", "agent_settled",
}

func expectLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  got:  %s\n  want: %s", strings.Join(got, "\n        "), strings.Join(want, "\n        "))
	}
}

// newSession starts a session on model with an event recorder.
func newSession(t *testing.T, rt *musepi.Runtime, model string) (*musepi.Session, *recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s, err := rt.NewSession(ctx, musepi.WithModel(model))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	unsubscribe := s.Subscribe(rec.add)
	t.Cleanup(unsubscribe)
	return s, rec
}

// prompt runs one prompt to its end, bounded in time, and waits for its
// agent_settled event (the n-th of the session).
func prompt(t *testing.T, s *musepi.Session, rec *recorder, n int, text string) (*musepi.AssistantMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	msg, err := s.Prompt(ctx, text)
	rec.waitFor(t, "agent_settled", n)
	return msg, err
}

// textOf is the text of a message's text blocks.
func textOf(msg *messages.AssistantMessage) string {
	var b strings.Builder
	for _, c := range msg.GetContent() {
		b.WriteString(c.GetText().GetText())
	}
	return b.String()
}

func userEntry(text string) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
}

func assistantEntry(m *messages.AssistantMessage) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_Assistant{Assistant: m}}
}

// stream calls p.Stream directly, bounded in time, collecting the deltas.
func stream(t *testing.T, p provider.Provider, req provider.Request) (*messages.AssistantMessage, []provider.Delta) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var mu sync.Mutex
	var deltas []provider.Delta
	msg := p.Stream(ctx, req, func(d provider.Delta) {
		mu.Lock()
		deltas = append(deltas, d)
		mu.Unlock()
	})
	if msg == nil {
		t.Fatal("Stream returned nil")
	}
	mu.Lock()
	defer mu.Unlock()
	return msg, deltas
}

// waitActive polls the server until its active count is want.
func waitActive(t *testing.T, srv *server, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := srv.Stats().Active
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fakellm active = %d after %v, want %d", got, within, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// all returns the events recorded so far.
func (r *recorder) all() []musepi.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]musepi.Event(nil), r.events...)
}

// newFallbackRuntime is a runtime on p as provider "fake" (one key) whose
// model fallback chain goes to fake/m2.
func newFallbackRuntime(t *testing.T, p provider.Provider) *musepi.Runtime {
	t.Helper()
	settings := fastRetry()
	settings.ModelFallback = true
	settings.FallbackChains = map[string][]string{"default": {"fake/m2"}}
	return newRuntime(t, musepi.WithProvider("fake", p, musepi.Credential{Name: "main", APIKey: "key-main"}),
		musepi.WithRetrySettings(settings))
}
