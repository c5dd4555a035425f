package musepi_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/actors"
	hist "github.com/musepi/musepi/history"
	"github.com/musepi/musepi/history/historytest"
	"github.com/musepi/musepi/messages"
	"github.com/musepi/musepi/provider"
)

// historyOf reads a session's history file as a fresh store would.
func historyOf(t *testing.T, dir, id string) []musepi.Entry {
	t.Helper()
	s, err := hist.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, entries, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return musepi.FromWireEntries(entries)
}

// expectSeq fails unless entries are numbered 1..n.
func expectSeq(t *testing.T, entries []musepi.Entry) {
	t.Helper()
	for i, e := range entries {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: %v", i, e.Seq, entries)
		}
	}
}

// kinds renders entries as "user:text", "assistant:text|error", ...
func kinds(entries []musepi.Entry) []string {
	var out []string
	for _, e := range entries {
		switch {
		case e.User != nil:
			out = append(out, "user:"+e.User.Text)
		case e.Assistant != nil:
			a := e.Assistant
			if a.ErrorMessage != "" {
				out = append(out, "assistant-error:"+a.ErrorMessage)
			} else {
				out = append(out, "assistant:"+a.Text())
			}
		case e.ToolResult != nil:
			out = append(out, "tool_result:"+e.ToolResult.Output)
		case e.ModelChange != nil:
			out = append(out, "model_change:"+e.ModelChange.To)
		}
	}
	return out
}

func expectKinds(t *testing.T, what string, entries []musepi.Entry, want ...string) {
	t.Helper()
	if got := kinds(entries); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// Item 1: a history with invalid content never opens as an empty session:
// NewSession fails naming the file and line, and writes nothing.
func TestFaultHistoryInvalidFailsOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	content := `{"seq":"1","user":{"text":"hi"}}` + "\n" + "not json\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, musepi.WithHistoryDir(dir), musepi.WithLogger(slog.New(slog.DiscardHandler)))
	_, err := h.rt.NewSession(context.Background(), musepi.WithModel("p/m"), musepi.WithSessionID("s"))
	var he *hist.Error
	if !errors.As(err, &he) || he.Path != path || he.Line != 2 || !errors.Is(err, hist.ErrInvalid) {
		t.Fatalf("NewSession on a corrupt history = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != content {
		t.Fatalf("the corrupt file was written to: %q", b)
	}
	// The id is free again once the file is repaired.
	if _, err := hist.Repair(path); err != nil {
		t.Fatal(err)
	}
	s, _ := h.session(musepi.WithSessionID("s"))
	msgs, err := s.Messages(context.Background())
	if err != nil || len(msgs) != 1 {
		t.Fatalf("after repair: %v, %v", msgs, err)
	}
}

// Item 2: a write that fails (a full disk) fails the prompt with ErrHistory
// and an error naming the file; what was not written is not in the
// context either; once there is room the session goes on with no gap or
// duplicate in seq.
func TestFaultHistoryFullDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	disk := historytest.NewDisk()
	store, err := hist.OpenFileStore(dir, hist.WithOpenFile(disk.Open))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, musepi.WithHistoryStore(store), musepi.WithRetrySettings(noFallback()), musepi.WithLogger(slog.New(slog.DiscardHandler)))
	s, rec := h.session(musepi.WithSessionID("s"))
	ctx := context.Background()
	expectHistoryErr := func(r result) {
		t.Helper()
		var he *hist.Error
		if !errors.Is(r.err, musepi.ErrHistory) || !errors.As(r.err, &he) || he.Path != path ||
			!strings.Contains(r.err.Error(), "no space left on device") {
			t.Fatalf("prompt error = %v; want ErrHistory naming %s and ENOSPC", r.err, path)
		}
		rec.mu.Lock()
		last := rec.events[len(rec.events)-1]
		rec.mu.Unlock()
		if settled, ok := last.(musepi.AgentSettled); !ok || settled.Success || !strings.Contains(settled.Error, path) {
			t.Fatalf("the last event is not an agent_settled naming the file: %#v", last)
		}
	}

	// The disk is full before the prompt: nothing is recorded, nothing sent.
	disk.SetRoom(0)
	expectHistoryErr(h.runPrompt(s, "lost"))
	expectCalls(t, "p", h.p, 0)

	// Room for the user entry only: the answer cannot be saved.
	user, err := protojson.Marshal(&messages.Entry{Seq: 1, Entry: &messages.Entry_User{User: &messages.UserMessage{Text: "one", TimestampMs: start.UnixMilli()}}})
	if err != nil {
		t.Fatal(err)
	}
	disk.SetRoom(int64(len(user)) + 10) // an answer needs far more
	h.p.SetScript("s", answer("unsaved"), answer("saved"), fail(503, "503 Service Unavailable"), answer("after"))
	expectHistoryErr(h.runPrompt(s, "one"))
	msgs, _ := s.Messages(ctx)
	expectKinds(t, "context after a lost answer", msgs, "user:one")

	// Room again: the session goes on. Submit says when the prompt is
	// recorded, before it settles.
	disk.SetRoom(-1)
	var order []string
	var mu sync.Mutex
	note := func(what string, err any) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, fmt.Sprintf("%s %v", what, err))
	}
	s.Submit(ctx, "two", func(err error) { note("accepted", err) }, func(_ *musepi.AssistantMessage, err error) { note("done", err) })
	h.run()
	// A refused prompt: accepted gets the error, then done.
	disk.SetRoom(0)
	s.Submit(ctx, "refused", func(err error) { note("accepted", errors.Is(err, musepi.ErrHistory)) },
		func(_ *musepi.AssistantMessage, err error) { note("done", errors.Is(err, musepi.ErrHistory)) })
	h.run()
	disk.SetRoom(-1)
	mu.Lock()
	if got := strings.Join(order, ", "); got != "accepted <nil>, done <nil>, accepted true, done true" {
		t.Fatalf("Submit callbacks: %s", got)
	}
	mu.Unlock()

	// The disk fills during a retry chain: the chain ends, nothing retries.
	ch := h.prompt(s, "three")
	h.advance(100 * time.Millisecond) // the 503 is saved and the backoff runs
	disk.SetRoom(0)
	h.run()
	expectHistoryErr(h.settle(ch))
	// The continue's turn ran; its answer could not be saved.
	expectCalls(t, "p", h.p, 4)
	lines := rec.lines(retryEvents...)
	expectLines(t, lines[len(lines)-4:],
		"auto_retry_start 1/10 delay=500ms class=transient",
		`auto_retry_end success=false attempt=1 error="Retry cancelled"`,
		"agent_end willRetry=false",
		"agent_settled success=false")
	msgs, _ = s.Messages(ctx)
	expectKinds(t, "context", msgs, "user:one", "user:two", "assistant:saved", "user:three")
	disk.SetRoom(-1)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	entries := historyOf(t, dir, "s")
	expectSeq(t, entries)
	expectKinds(t, "history", entries, "user:one", "user:two", "assistant:saved", "user:three",
		"assistant-error:503 Service Unavailable")
	if disk.Failures() < 3 {
		t.Fatalf("%d injected failures, want 3", disk.Failures())
	}
}

// Item 3: one writer per session: a second runtime on the same directory
// (as another process would) cannot open a session that is open, and gets
// the holder's pid; once the first closes it, the second resumes it.
func TestFaultHistorySecondWriter(t *testing.T) {
	dir := t.TempDir()
	h1 := newHarness(t, musepi.WithHistoryDir(dir))
	h2 := newHarness(t, musepi.WithHistoryDir(dir))
	s1, _ := h1.session(musepi.WithSessionID("s"))
	h1.p.SetScript("s", answer("first"))
	expectAnswer(t, h1.runPrompt(s1, "hi"), "first")
	_, err := h2.rt.NewSession(context.Background(), musepi.WithModel("p/m"), musepi.WithSessionID("s"))
	want := "session is open in another process (pid " + strconv.Itoa(os.Getpid()) + ")"
	if !errors.Is(err, hist.ErrLocked) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second NewSession = %v, want %q", err, want)
	}
	if err := s1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2, _ := h2.session(musepi.WithSessionID("s"))
	h2.p.SetScript("s", answer("second"))
	expectAnswer(t, h2.runPrompt(s2, "again"), "second")
	if err := s2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries := historyOf(t, dir, "s")
	expectSeq(t, entries)
	expectKinds(t, "history", entries, "user:hi", "assistant:first", "user:again", "assistant:second")
}

// writeHistory writes entries (numbered from 1) as session id's history.
func writeHistory(t *testing.T, dir, id string, entries ...*messages.Entry) {
	t.Helper()
	s, err := hist.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, _, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, e := range entries {
		e.Seq = uint64(i + 1)
	}
	if err := l.Append(entries...); err != nil {
		t.Fatal(err)
	}
}

func userEntry(text string) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_User{User: &messages.UserMessage{Text: text}}}
}

func assistantEntry(msg *messages.AssistantMessage) *messages.Entry {
	return &messages.Entry{Entry: &messages.Entry_Assistant{Assistant: msg}}
}

// Item 5: a session resumed after a crash in the middle of a prompt marks
// the prompt interrupted (closing any tool call left without a result), so
// that its context holds exactly what its history holds.
func TestResumeMarksInterruptedPrompt(t *testing.T) {
	toolCall := &messages.AssistantMessage{StopReason: messages.StopReason_STOP_REASON_TOOL_USE, Content: []*messages.ContentBlock{
		{Block: &messages.ContentBlock_ToolCall{ToolCall: &messages.ToolCall{Id: "c1", Name: "ls"}}}}}
	tests := []struct {
		name        string
		written     []*messages.Entry
		wantHistory []string
		wantContext []string
	}{
		{"answered", []*messages.Entry{userEntry("q"), assistantEntry(provider.Text("a"))},
			[]string{"user:q", "assistant:a"}, []string{"user:q", "assistant:a"}},
		{"unanswered prompt", []*messages.Entry{userEntry("q"), assistantEntry(provider.Text("a")), userEntry("lost")},
			[]string{"user:q", "assistant:a", "user:lost", "assistant-error:" + actors.InterruptedError},
			[]string{"user:q", "assistant:a", "user:lost"}},
		{"tools running", []*messages.Entry{userEntry("q"), assistantEntry(toolCall)},
			[]string{"user:q", "assistant:", "tool_result:" + actors.InterruptedError, "assistant-error:" + actors.InterruptedError},
			[]string{"user:q", "assistant:", "tool_result:" + actors.InterruptedError}},
		{"failed prompt (settled or in backoff)", []*messages.Entry{userEntry("q"), assistantEntry(provider.Failure(503, "503 Service Unavailable", nil))},
			[]string{"user:q", "assistant-error:503 Service Unavailable"}, []string{"user:q"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeHistory(t, dir, "s", tt.written...)
			h := newHarness(t, musepi.WithHistoryDir(dir), musepi.WithLogger(slog.New(slog.DiscardHandler)))
			s, _ := h.session(musepi.WithSessionID("s"))
			ctx := context.Background()
			got, err := s.History(ctx)
			if err != nil {
				t.Fatal(err)
			}
			expectSeq(t, got)
			expectKinds(t, "history", got, tt.wantHistory...)
			msgs, err := s.Messages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			expectKinds(t, "context", msgs, tt.wantContext...)
			h.p.SetScript("s", answer("next"))
			expectAnswer(t, h.runPrompt(s, "next"), "next")
		})
	}
}

// Item 5: the model in use when the process stopped, a pinned fallback
// included, and the primary model the user chose come back on resume.
func TestResumeRestoresModel(t *testing.T) {
	ctx := context.Background()
	t.Run("pinned fallback", func(t *testing.T) {
		dir := t.TempDir()
		h := newHarness(t, musepi.WithHistoryDir(dir), musepi.WithRetrySettings(withFallback(fallbackModel)))
		s, _ := h.session(musepi.WithSessionID("s"))
		h.p.SetScript("s", refusal("refusal", "The model declined to answer this request"))
		h.other.SetScript("s", answer("from q"))
		expectAnswer(t, h.runPrompt(s, "one"), "from q")
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}

		h2 := newHarness(t, musepi.WithHistoryDir(dir), musepi.WithRetrySettings(withFallback(fallbackModel)))
		s2, rec := h2.session(musepi.WithSessionID("s"))
		if s2.Model() != fallbackModel {
			t.Fatalf("resumed on %s, want the pinned %s", s2.Model(), fallbackModel)
		}
		h2.advance(time.Hour) // pinned: never reverted
		h2.other.SetScript("s", answer("still q"))
		expectAnswer(t, h2.runPrompt(s2, "two"), "still q")
		expectCalls(t, "p", h2.p, 0)
		expectLines(t, rec.lines(retryEvents...), "agent_end willRetry=false", "agent_settled success=true")
	})
	t.Run("model set by the user", func(t *testing.T) {
		dir := t.TempDir()
		h := newHarness(t, musepi.WithHistoryDir(dir))
		s, _ := h.session(musepi.WithSessionID("s"))
		if err := s.SetModel(ctx, "q/chosen"); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		h2 := newHarness(t, musepi.WithHistoryDir(dir))
		s2, _ := h2.session(musepi.WithSessionID("s"))
		if s2.Model() != "q/chosen" {
			t.Fatalf("resumed on %s, want q/chosen", s2.Model())
		}
		h2.other.SetScript("s", answer("chosen"))
		expectAnswer(t, h2.runPrompt(s2, "hi"), "chosen")
	})
	t.Run("a provider no longer configured", func(t *testing.T) {
		dir := t.TempDir()
		writeHistory(t, dir, "s", &messages.Entry{Entry: &messages.Entry_ModelChange{ModelChange: &messages.ModelChange{
			From: "p/m", To: "gone/x", Reason: "user"}}})
		h := newHarness(t, musepi.WithHistoryDir(dir))
		s, _ := h.session(musepi.WithSessionID("s"))
		if s.Model() != "p/m" {
			t.Fatalf("resumed on %s, want the configured p/m", s.Model())
		}
	})
}

// A session's actor starts with the first message the session is sent (as
// virtual actors are activated); one never used holds its history open
// all the same, and closing it, or shutting the runtime down, releases it.
func TestUnusedSessionHoldsAndReleasesItsHistory(t *testing.T) {
	dir := t.TempDir()
	h1 := newHarness(t, musepi.WithHistoryDir(dir))
	h2 := newHarness(t, musepi.WithHistoryDir(dir))
	open := func(h *harness, id string) error {
		_, err := h.rt.NewSession(context.Background(), musepi.WithModel("p/m"), musepi.WithSessionID(id))
		return err
	}
	s, _ := h1.session(musepi.WithSessionID("closed"))
	if err := open(h1, "shut"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"closed", "shut"} {
		if err := open(h2, id); !errors.Is(err, hist.ErrLocked) {
			t.Fatalf("%s: second NewSession = %v, want ErrLocked while the first holds it unused", id, err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prompt(context.Background(), "hi"); !errors.Is(err, musepi.ErrSessionClosed) {
		t.Fatalf("prompt after Close = %v, want ErrSessionClosed", err)
	}
	if err := h1.rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"closed", "shut"} {
		if err := open(h2, id); err != nil {
			t.Fatalf("%s: NewSession after its holder let go: %v", id, err)
		}
	}
}
