package musepi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

func toolUse(calls ...*messages.ToolCall) provider.Outcome {
	m := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE}
	for _, c := range calls {
		m.Content = append(m.Content, &messages.ContentBlock{Block: &messages.ContentBlock_ToolCall{ToolCall: c}})
	}
	return provider.Outcome{Message: m}
}

// The session runs the model's tool calls through registered Go tools and
// continues until the model stops; a failing, panicking or unknown tool
// becomes an error result for the model to read.
func TestToolCallsRunUntilTheModelStops(t *testing.T) {
	echo := musepi.Tool{Name: "echo", Run: func(_ context.Context, args string) (string, error) { return "echo " + args, nil }}
	broken := musepi.Tool{Name: "broken", Run: func(context.Context, string) (string, error) { return "", errors.New("disk full") }}
	boom := musepi.Tool{Name: "boom", Run: func(context.Context, string) (string, error) { panic("kaboom") }}
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithTools(echo, broken, boom))
	s, rec := h.session()
	h.p.SetScript(s.ID(),
		toolUse(&messages.ToolCall{Id: "1", Name: "echo", ArgumentsJson: `{"x":1}`},
			&messages.ToolCall{Id: "2", Name: "broken"},
			&messages.ToolCall{Id: "3", Name: "boom"},
			&messages.ToolCall{Id: "4", Name: "missing"}),
		answer("all done"))
	ch := h.prompt(s, "use the tools")
	h.run()
	r := h.settle(ch)
	if r.err != nil || r.msg.Text() != "all done" {
		t.Fatalf("prompt = %v, %v", r.msg, r.err)
	}
	calls := h.p.Calls()
	if len(calls) != 2 {
		t.Fatalf("provider calls = %d, want 2", len(calls))
	}
	if got := calls[0].Tools; len(got) != 3 || got[0].Name != "echo" {
		t.Fatalf("tool specs sent = %+v", got)
	}
	var results []*messages.ToolResult
	for _, e := range calls[1].Context {
		if r := e.GetToolResult(); r != nil {
			results = append(results, r)
		}
	}
	want := []struct {
		output  string
		isError bool
	}{
		{`echo {"x":1}`, false},
		{"disk full", true},
		{`tool "boom" panicked: kaboom`, true},
		{`unknown tool "missing"`, true},
	}
	if len(results) != len(want) {
		t.Fatalf("tool results = %v", results)
	}
	for i, w := range want {
		if results[i].GetOutput() != w.output || results[i].GetIsError() != w.isError {
			t.Errorf("result %d = %q (error %t), want %q (error %t)", i, results[i].GetOutput(), results[i].GetIsError(), w.output, w.isError)
		}
	}
	expectLines(t, rec.lines("agent_start", "message_end", "agent_end", "agent_settled"),
		"agent_start", "message_end", "message_end", "agent_end willRetry=false", "agent_settled success=true")
}

// Spec 3, "What resets the counter": a tool-use message is a successful
// assistant message. A loop 503 → tool call → 503 → answer runs two chains
// of one attempt each, each closed by its own auto_retry_end before the
// loop goes on.
func TestToolUseMessageEndsTheRetryChain(t *testing.T) {
	echo := musepi.Tool{Name: "echo", Run: func(_ context.Context, args string) (string, error) { return "echo " + args, nil }}
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithTools(echo))
	s, rec := h.session()
	h.p.SetScript(s.ID(),
		fail(503, "Service Unavailable"),
		toolUse(&messages.ToolCall{Id: "1", Name: "echo", ArgumentsJson: `{}`}),
		fail(503, "Service Unavailable"),
		answer("done"))
	ch := h.prompt(s, "loop")
	h.run()
	if r := h.settle(ch); r.err != nil {
		t.Fatalf("prompt: %v", r.err)
	}
	expectLines(t, rec.lines("auto_retry_start", "auto_retry_end", "message_end", "agent_end", "agent_settled"),
		"message_end",
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"message_end",
		"auto_retry_end success=true attempt=1",
		"message_end",
		"agent_end willRetry=true",
		"auto_retry_start 1/10 delay=500ms class=transient",
		"message_end",
		"agent_end willRetry=false",
		"auto_retry_end success=true attempt=1",
		"agent_settled success=true")
	if n := len(h.p.Calls()); n != 4 {
		t.Errorf("provider calls = %d, want 4", n)
	}
}

// A compaction hook replaces the context and the prompt continues.
func TestCompactionHookContinuesThePrompt(t *testing.T) {
	var failedText string
	hook := func(_ context.Context, _ string, entries []musepi.Entry, failed *musepi.AssistantMessage) ([]musepi.Entry, error) {
		failedText = failed.ErrorMessage
		return entries[len(entries)-1:], nil // keep the last user message only
	}
	h := newHarness(t, musepi.WithRetrySettings(noFallback()), musepi.WithCompactionHook(hook))
	s, rec := h.session()
	h.p.SetScript(s.ID(), answer("first"), fail(400, "prompt is too long: 213462 tokens > 200000 maximum"), answer("compacted"))
	h.settle(h.prompt(s, "one"))
	ch := h.prompt(s, "two")
	h.run()
	r := h.settle(ch)
	if r.err != nil || r.msg.Text() != "compacted" {
		t.Fatalf("prompt = %v, %v", r.msg, r.err)
	}
	calls := h.p.Calls()
	if n := len(calls[2].Context); n != 1 || calls[2].Context[0].GetUser().GetText() != "two" {
		t.Fatalf("context after compaction = %v", calls[2].Context)
	}
	if !strings.HasPrefix(failedText, "prompt is too long") {
		t.Errorf("the hook got the failed turn %q", failedText)
	}
	if got := rec.lines("compaction_required"); len(got) != 1 {
		t.Fatalf("compaction_required events = %v", got)
	}
	ends := rec.ofType("compaction_end")
	if len(ends) != 1 {
		t.Fatalf("compaction_end events = %v", ends)
	}
	if end := ends[0].(musepi.CompactionEnd); end.Reason != "overflow" || !end.WillRetry || end.Aborted || end.ErrorMessage != "" {
		t.Errorf("compaction_end = %+v, want reason overflow and willRetry", end)
	}
}

// IsCompacting reports a compaction hook that runs (here a manual one),
// and goes back to false once it returned.
func TestIsCompactingWhileTheHookRuns(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	hook := func(_ context.Context, _ string, entries []musepi.Entry, _ *musepi.AssistantMessage) ([]musepi.Entry, error) {
		close(entered)
		<-release
		return entries, nil
	}
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", provider.NewScripted(provider.Outcome{Message: provider.Text("hi")})),
		musepi.WithCompactionHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func() { _ = rt.Shutdown(ctx) }()
	s, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	if s.IsCompacting() {
		t.Fatal("IsCompacting before any compaction")
	}
	done := make(chan error, 1)
	go func() { _, err := s.Compact(ctx); done <- err }()
	<-entered
	if !s.IsCompacting() {
		t.Error("IsCompacting = false while the hook runs")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.IsCompacting() {
		t.Error("IsCompacting = true after the hook returned")
	}
}

// While a compaction asked for between prompts runs, a prompt and another
// compaction are refused (the session's core is compacting), and the
// compaction's caller gets the compacted context; a prompt then goes on.
func TestCompactionBetweenPromptsRefusesAPrompt(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	hook := func(_ context.Context, _ string, runtime []musepi.Entry, _ *musepi.AssistantMessage) ([]musepi.Entry, error) {
		close(entered)
		<-release
		return runtime, nil
	}
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", provider.NewScripted(provider.Outcome{Message: provider.Text("hi")})),
		musepi.WithCompactionHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func() { _ = rt.Shutdown(ctx) }()
	s, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Compact(ctx); done <- err }()
	<-entered
	if _, err := s.Prompt(ctx, "hello"); !errors.Is(err, musepi.ErrBusy) {
		t.Errorf("Prompt while compacting = %v, want ErrBusy", err)
	}
	if _, err := s.Compact(ctx); err == nil || !strings.Contains(err.Error(), "a prompt or a compaction is running") {
		t.Errorf("Compact while compacting = %v, want refused", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prompt(ctx, "hello"); err != nil {
		t.Fatalf("Prompt after the compaction: %v", err)
	}
}

// A session closed while a compaction asked for between prompts runs
// answers the compaction's caller with an error (it waited forever).
func TestCompactionBetweenPromptsEndsWithTheSession(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{})
	hook := func(_ context.Context, _ string, runtime []musepi.Entry, _ *musepi.AssistantMessage) ([]musepi.Entry, error) {
		close(entered)
		<-release
		return runtime, nil
	}
	rt, err := musepi.NewRuntime(musepi.WithProvider("p", provider.NewScripted(provider.Outcome{Message: provider.Text("hi")})),
		musepi.WithCompactionHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer func() { _ = rt.Shutdown(ctx) }()
	s, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Compact(ctx); done <- err }()
	<-entered
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "shut down before the compaction ended") {
		t.Fatalf("Compact of a session closed meanwhile = %v, want the shutdown", err)
	}
}
