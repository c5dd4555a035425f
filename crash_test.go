package musepi_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

// panickySource panics on its first n draws (shared by every chain), then
// gives the nominal delay.
type panickySource struct{ left *atomic.Int64 }

func (p panickySource) Float64() float64 {
	if p.left.Add(-1) >= 0 {
		panic("jitter source exploded")
	}
	return 1
}

func panicking(n int64) musepi.Option {
	left := &atomic.Int64{}
	left.Store(n)
	return musepi.WithJitterSource(func() retry.Source { return panickySource{left} })
}

// logRecorder is a logger whose text output a test reads.
type logRecorder struct {
	mu   sync.Mutex
	text strings.Builder
}

func (l *logRecorder) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.text.Write(p)
	}), nil))
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// A jitter source that panics is a bug to report, not a state to roll
// back: the panic is logged with the session and its stack, the prompt
// returns at once with an error that names it (never a hang), and the
// actor restarts from its history. Other sessions do not notice, and the
// session serves its next prompt, retries included.
func TestPanickingJitterSourceEndsThePrompt(t *testing.T) {
	var logs logRecorder
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), panicking(1), musepi.WithLogger(logs.logger()))
	s, rec := h.session()
	other, otherRec := h.session()
	h.p.SetScript(s.ID(), fail(503, "503 Service Unavailable"), fail(503, "503 Service Unavailable"), answer("recovered"))
	h.p.SetScript(other.ID(), answer("unbothered"))
	ch, chOther := h.prompt(s, "hi"), h.prompt(other, "hi")
	h.run()
	r := h.settle(ch)
	if !errors.Is(r.err, musepi.ErrPromptFailed) || !strings.Contains(r.err.Error(), "the session panicked") ||
		!strings.Contains(r.err.Error(), "jitter source exploded") {
		t.Fatalf("prompt error = %v, want ErrPromptFailed naming the panic", r.err)
	}
	if r := h.settle(chOther); r.err != nil {
		t.Fatalf("the other session noticed: %v", r.err)
	}
	expectLines(t, otherRec.lines(retryEvents...), "agent_end willRetry=false", "agent_settled success=true")
	for _, want := range []string{"session actor panicked", "session=" + s.ID(), "panic=\"jitter source exploded\"", "crash_test.go"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("the log lacks %q:\n%s", want, logs.String())
		}
	}
	before := len(rec.lines(retryEvents...))
	ch = h.prompt(s, "again")
	h.run()
	if r := h.settle(ch); r.err != nil || r.msg.Text() != "recovered" {
		t.Fatalf("next prompt = %v, %v", r.msg, r.err)
	}
	expectLines(t, rec.lines(retryEvents...)[before:],
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true")
}

// writerFunc is an io.Writer from a function.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// panickyProvider panics in Stream.
type panickyProvider struct{}

func (panickyProvider) Stream(context.Context, provider.Request, func(provider.Delta)) *messages.AssistantMessage {
	panic("adapter bug")
}
func (panickyProvider) ResetSession(string) {}

// A panic in a provider adapter becomes a failed turn with a clear error.
func TestCrashContainmentProvider(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithProvider("bad", panickyProvider{}))
	s, err := h.rt.NewSession(context.Background(), musepi.WithModel("bad/m"))
	if err != nil {
		t.Fatal(err)
	}
	ch := h.prompt(s, "hi")
	h.run()
	r := h.settle(ch)
	if !errors.Is(r.err, musepi.ErrPromptFailed) || !strings.Contains(r.err.Error(), "provider panicked: adapter bug") {
		t.Fatalf("prompt error = %v", r.err)
	}
}

// A panic in a subscriber is contained: later events still reach it and
// the others, and the prompt completes.
func TestCrashContainmentSubscriber(t *testing.T) {
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithLogger(slog.New(slog.DiscardHandler)))
	s, rec := h.session()
	s.Subscribe(func(musepi.Event) { panic("subscriber bug") })
	h.p.SetScript(s.ID(), answer("fine"))
	ch := h.prompt(s, "hi")
	h.run()
	if r := h.settle(ch); r.err != nil {
		t.Fatal(r.err)
	}
	expectLines(t, rec.lines(retryEvents...), "agent_end willRetry=false", "agent_settled success=true")
}

// A panic in a registered tool becomes an error result for the model; the
// session goes on to the model's next turn.
func TestCrashContainmentTool(t *testing.T) {
	boom := musepi.Tool{Name: "boom", Run: func(context.Context, string) (string, error) { panic("tool bug") }}
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithTools(boom))
	s, _ := h.session()
	h.p.SetScript(s.ID(), toolUse(&messages.ToolCall{Id: "1", Name: "boom"}), answer("survived"))
	ch := h.prompt(s, "hi")
	h.run()
	if r := h.settle(ch); r.err != nil || r.msg.Text() != "survived" {
		t.Fatalf("prompt = %v, %v", r.msg, r.err)
	}
	last := h.p.Calls()[1].Context
	if res := last[len(last)-1].GetToolResult(); !res.GetIsError() || res.GetOutput() != `tool "boom" panicked: tool bug` {
		t.Fatalf("tool result %v", res)
	}
}
