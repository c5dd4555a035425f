package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/musepi/musepi"
)

// fakeControls records what the model asked of the session.
type fakeControls struct {
	retrying   bool
	aborts     int
	abortRetry int
}

func (f *fakeControls) Abort()           { f.aborts++ }
func (f *fakeControls) AbortRetry()      { f.abortRetry++ }
func (f *fakeControls) IsRetrying() bool { return f.retrying }

// harness is a model with a fake clock and session.
type harness struct {
	t       *testing.T
	m       model
	ctl     *fakeControls
	clock   time.Time
	prompts []string
}

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, ctl: &fakeControls{}, clock: time.Unix(1_700_000_000, 0)}
	h.m = newModel(h.ctl, func(text string) { h.prompts = append(h.prompts, text) }, "fake/m1")
	h.m.now = func() time.Time { return h.clock }
	h.send(tea.WindowSizeMsg{Width: 100, Height: 20})
	return h
}

func (h *harness) send(msg tea.Msg) tea.Cmd {
	h.t.Helper()
	next, cmd := h.m.Update(msg)
	h.m = next.(model)
	return cmd
}

func (h *harness) event(ev musepi.Event) tea.Cmd { return h.send(eventMsg{ev: ev}) }

func (h *harness) key(k string) tea.Cmd {
	switch k {
	case "enter":
		return h.send(tea.KeyMsg{Type: tea.KeyEnter})
	case "esc":
		return h.send(tea.KeyMsg{Type: tea.KeyEsc})
	case "ctrl+c":
		return h.send(tea.KeyMsg{Type: tea.KeyCtrlC})
	}
	return h.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)})
}

func (h *harness) prompt(text string) {
	h.t.Helper()
	h.key(text)
	h.key("enter")
}

func (h *harness) view() string { return ansi.Strip(h.m.View()) }

// statusLine is the line between the transcript and the input.
func (h *harness) statusLine() string {
	lines := strings.Split(h.view(), "\n")
	return strings.TrimSpace(lines[len(lines)-3])
}

func (h *harness) retryStart(attempt, maxAttempts int, delay time.Duration) tea.Cmd {
	return h.heldRetryStart(attempt, maxAttempts, delay, 0)
}

// heldRetryStart is an auto_retry_start whose delay the retry budget
// extended by budgetMs.
func (h *harness) heldRetryStart(attempt, maxAttempts int, delay, budget time.Duration) tea.Cmd {
	return h.event(musepi.AutoRetryStart{Attempt: attempt, MaxAttempts: maxAttempts, Delay: delay,
		ErrorMessage: "429 Too Many Requests", ErrorClass: "transient", BudgetDelay: budget})
}

func TestModelRetryCountdown(t *testing.T) {
	type step struct {
		advance time.Duration
		want    string
	}
	cases := []struct {
		name    string
		attempt int
		max     int
		delay   time.Duration
		budget  time.Duration
		steps   []step
	}{
		{"2000ms counts 2s then 1s", 1, 10, 2 * time.Second, 0, []step{
			{0, "Retrying (1/10) in 2s… (esc to cancel)"},
			{time.Second, "Retrying (1/10) in 1s… (esc to cancel)"},
			{time.Second, "Retrying (1/10)… (esc to cancel)"},
		}},
		{"rounds up", 3, 10, 2500 * time.Millisecond, 0, []step{
			{0, "Retrying (3/10) in 3s… (esc to cancel)"},
			{500 * time.Millisecond, "Retrying (3/10) in 2s… (esc to cancel)"},
			{999 * time.Millisecond, "Retrying (3/10) in 2s… (esc to cancel)"},
			{time.Millisecond, "Retrying (3/10) in 1s… (esc to cancel)"},
		}},
		{"retry-after 3s", 1, 10, 3 * time.Second, 0, []step{
			{0, "Retrying (1/10) in 3s… (esc to cancel)"},
			{time.Second, "Retrying (1/10) in 2s… (esc to cancel)"},
		}},
		{"no delay (fallback)", 2, 5, 0, 0, []step{
			{0, "Retrying (2/5)… (esc to cancel)"},
		}},
		{"held by the retry budget", 4, 10, 6 * time.Second, 2 * time.Second, []step{
			{0, "Retrying (4/10) in 6s, held by the retry budget… (esc to cancel)"},
			{6 * time.Second, "Retrying (4/10)… (esc to cancel)"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.prompt("hello")
			if got := h.statusLine(); !strings.Contains(got, "Working…") {
				t.Fatalf("status before the retry %q, want the working spinner", got)
			}
			cmd := h.heldRetryStart(tc.attempt, tc.max, tc.delay, tc.budget)
			if (cmd != nil) != (tc.delay > 0) {
				t.Errorf("auto_retry_start: tick scheduled %v, want %v", cmd != nil, tc.delay > 0)
			}
			for i, s := range tc.steps {
				h.clock = h.clock.Add(s.advance)
				h.send(retryTickMsg{seq: h.m.retry.seq})
				got := h.statusLine()
				if !strings.HasSuffix(got, s.want) {
					t.Errorf("step %d (+%v): status %q, want %q", i, s.advance, got, s.want)
				}
				if strings.Contains(got, "Working") {
					t.Errorf("step %d: spinner text still shown: %q", i, got)
				}
			}
		})
	}
}

// TestModelRetryReleased: a retry_released moves the held retry's
// countdown to what is left, and the line no longer says it is held; a
// release of another attempt changes nothing.
func TestModelRetryReleased(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	h.heldRetryStart(4, 10, 6*time.Second, 2*time.Second)
	h.clock = h.clock.Add(time.Second)
	if cmd := h.event(musepi.RetryReleased{Attempt: 3, Delay: 0}); cmd != nil {
		t.Error("a release of another attempt scheduled a tick")
	}
	if got, want := h.statusLine(), "Retrying (4/10) in 5s, held by the retry budget… (esc to cancel)"; !strings.HasSuffix(got, want) {
		t.Errorf("after another attempt's release: status %q, want %q", got, want)
	}
	if cmd := h.event(musepi.RetryReleased{Attempt: 4, Delay: 700 * time.Millisecond}); cmd == nil {
		t.Error("the release scheduled no tick")
	}
	if got, want := h.statusLine(), "Retrying (4/10) in 1s… (esc to cancel)"; !strings.HasSuffix(got, want) {
		t.Errorf("released: status %q, want %q", got, want)
	}
	h.clock = h.clock.Add(700 * time.Millisecond)
	h.send(retryTickMsg{seq: h.m.retry.seq})
	if got, want := h.statusLine(), "Retrying (4/10)… (esc to cancel)"; !strings.HasSuffix(got, want) {
		t.Errorf("released, 700ms later: status %q, want %q", got, want)
	}
}

func TestModelNextTick(t *testing.T) {
	base := time.Unix(0, 0)
	cases := []struct {
		delay, elapsed, want time.Duration
	}{
		{2000 * time.Millisecond, 0, time.Second},
		{2500 * time.Millisecond, 0, 500 * time.Millisecond},
		{2500 * time.Millisecond, 500 * time.Millisecond, time.Second},
		{3000 * time.Millisecond, 2500 * time.Millisecond, 500 * time.Millisecond},
		{1000 * time.Millisecond, time.Second, 0},
		{0, 0, 0},
	}
	for _, tc := range cases {
		r := &retryState{deadline: base.Add(tc.delay)}
		if got := r.nextTick(base.Add(tc.elapsed)); got != tc.want {
			t.Errorf("delay %v after %v: next tick in %v, want %v", tc.delay, tc.elapsed, got, tc.want)
		}
	}
}

func TestModelStaleTickIgnored(t *testing.T) {
	h := newHarness(t)
	h.prompt("hi")
	h.retryStart(1, 10, 2*time.Second)
	old := h.m.retry.seq
	h.retryStart(2, 10, 4*time.Second)
	if cmd := h.send(retryTickMsg{seq: old}); cmd != nil {
		t.Error("a tick of an earlier attempt scheduled another tick")
	}
	if got := h.statusLine(); got != "Retrying (2/10) in 4s… (esc to cancel)" {
		t.Errorf("status %q", got)
	}
}

func TestModelEscDispatch(t *testing.T) {
	cases := []struct {
		name                string
		running, retrying   bool
		wantAbort, wantRetr int
	}{
		{"retrying cancels the retry", true, true, 0, 1},
		{"running aborts the prompt", true, false, 1, 0},
		{"idle does nothing", false, false, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.running {
				h.prompt("hello")
			}
			if tc.retrying {
				h.retryStart(1, 10, 3*time.Second)
			}
			h.ctl.retrying = tc.retrying
			h.key("esc")
			if h.ctl.aborts != tc.wantAbort || h.ctl.abortRetry != tc.wantRetr {
				t.Errorf("Abort %d, AbortRetry %d; want %d, %d", h.ctl.aborts, h.ctl.abortRetry, tc.wantAbort, tc.wantRetr)
			}
		})
	}
}

// chainEvents are the events of a prompt whose call failed and which made
// retries retries (each one's auto_retry_start, then its call), the last
// retry's call still out.
func chainEvents(retries int) []musepi.Event {
	failed := musepi.AgentEnd{WillRetry: true, Message: &musepi.AssistantMessage{
		StopReason: musepi.StopReasonError, ErrorMessage: "503 Service Unavailable"}}
	evs := []musepi.Event{musepi.AgentStart{User: &musepi.UserMessage{Text: "hello"}}, failed}
	for n := 1; n <= retries; n++ {
		evs = append(evs, musepi.AutoRetryStart{Attempt: n, MaxAttempts: 10, Delay: time.Second, ErrorClass: "transient"},
			musepi.AgentStart{})
		if n < retries {
			evs = append(evs, failed)
		}
	}
	return evs
}

// The line at a chain's end counts the retries made (a retry counts once
// its call went out), whatever auto_retry_end's attempt says: a cancelled
// retry was never made, nor the one a wait over retry.maxDelayMs refused.
func TestModelRetryEnd(t *testing.T) {
	const over = "provider asked for 600000 ms, more than retry.maxDelayMs (300000 ms): 429 Too Many Requests"
	pending := musepi.AutoRetryStart{Attempt: 3, MaxAttempts: 10, Delay: 3 * time.Second, ErrorClass: "transient"}
	cases := []struct {
		name     string
		events   []musepi.Event
		err      error
		want     string // the transcript's line about the chain
		wantNot  string
		errLines int
	}{
		{
			name:   "success after 1 retry",
			events: append(chainEvents(1), musepi.AutoRetryEnd{Success: true, Attempt: 1}),
			want:   "✓ Recovered after 1 retry", wantNot: "Retry failed",
		},
		{
			name:   "recovered after 2 retries",
			events: append(chainEvents(2), musepi.AutoRetryEnd{Success: true, Attempt: 2}),
			want:   "✓ Recovered after 2 retries", wantNot: "Retry failed",
		},
		{
			name:   "give-up with maxRetries 0",
			events: append(chainEvents(0), musepi.AutoRetryEnd{Attempt: 0, FinalError: "503 Service Unavailable"}),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: "503 Service Unavailable"},
			want:   "Retry failed after 0 attempts: 503 Service Unavailable", wantNot: "Error:", errLines: 1,
		},
		{
			name:   "a first wait over retry.maxDelayMs",
			events: append(chainEvents(0), musepi.AutoRetryEnd{Attempt: 1, FinalError: over}),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: over},
			want:   "Retry failed after 0 attempts: " + over, wantNot: "Error:", errLines: 1,
		},
		{
			name:   "give up after 2 retries (maxRetries 2)",
			events: append(chainEvents(2), musepi.AutoRetryEnd{Attempt: 2, FinalError: "503 Service Unavailable"}),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: "503 Service Unavailable"},
			want:   "Retry failed after 2 attempts: 503 Service Unavailable", wantNot: "Error:", errLines: 1,
		},
		{
			name:   "Esc while retry 3/10 waits",
			events: append(chainEvents(2), pending, musepi.AutoRetryEnd{Attempt: 3, FinalError: "Retry cancelled"}),
			err:    &musepi.PromptError{Kind: musepi.ErrRetryCancelled, Detail: "Retry cancelled"},
			want:   "Retry failed after 2 attempts: Retry cancelled", errLines: 1,
		},
		{
			name:   "exhausted",
			events: append(chainEvents(10), musepi.AutoRetryEnd{Attempt: 10, FinalError: "529 overloaded"}),
			err:    &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: "529 overloaded"},
			want:   "Retry failed after 10 attempts: 529 overloaded", wantNot: "Error:", errLines: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.prompt("hello")
			for _, ev := range tc.events {
				h.event(ev)
			}
			if strings.Contains(h.view(), "Retrying (") {
				t.Errorf("retry line not cleared:\n%s", h.view())
			}
			h.send(promptDoneMsg{err: tc.err})
			v := h.view()
			if tc.wantNot != "" && strings.Contains(v, tc.wantNot) {
				t.Errorf("view has %q:\n%s", tc.wantNot, v)
			}
			n, found := 0, false
			for _, e := range h.m.entries {
				if e.kind == errorEntry {
					n++
				}
				found = found || e.text == tc.want
			}
			if !found {
				t.Errorf("no transcript line %q: %+v", tc.want, h.m.entries)
			}
			if n != tc.errLines {
				t.Errorf("%d error lines, want %d: %+v", n, tc.errLines, h.m.entries)
			}
			if h.m.running || strings.Contains(h.statusLine(), "Working") {
				t.Errorf("still running after the prompt returned: %q", h.statusLine())
			}
		})
	}
}

func TestModelRetryFailedLine(t *testing.T) {
	cases := []struct {
		retries int
		final   string
		want    string
	}{
		{0, "Retry cancelled", "Retry failed after 0 attempts: Retry cancelled"},
		{1, "503 Service Unavailable", "Retry failed after 1 attempt: 503 Service Unavailable"},
		{10, "429 rate limited", "Retry failed after 10 attempts: 429 rate limited"},
	}
	for _, tc := range cases {
		if got := retryFailedLine(tc.retries, tc.final); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestModelStreamsAnswer(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	if len(h.prompts) != 1 || h.prompts[0] != "hello" {
		t.Fatalf("prompts started %q", h.prompts)
	}
	if h.m.input.Value() != "" {
		t.Errorf("input not cleared: %q", h.m.input.Value())
	}
	h.event(musepi.AgentStart{Generation: 1})
	h.event(musepi.MessageUpdate{Kind: "text", Delta: "Hello "})
	h.event(musepi.MessageUpdate{Kind: "text", Delta: "there"})
	if v := h.view(); !strings.Contains(v, "> hello") || !strings.Contains(v, "Hello there") {
		t.Errorf("view:\n%s", v)
	}
	// Enter while running starts nothing.
	h.prompt("again")
	if len(h.prompts) != 1 {
		t.Errorf("a second prompt started while one runs: %q", h.prompts)
	}
	h.event(musepi.MessageEnd{})
	h.event(musepi.AgentSettled{Generation: 1, Success: true})
	h.send(promptDoneMsg{msg: &musepi.AssistantMessage{}})
	if h.statusLine() != "" {
		t.Errorf("status after the answer %q", h.statusLine())
	}
	h.key("enter") // "again" is still in the input
	if len(h.prompts) != 2 || h.prompts[1] != "again" {
		t.Errorf("prompts %q", h.prompts)
	}
}

func TestModelAnswerFromMessage(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	msg := &musepi.AssistantMessage{Content: []musepi.Block{musepi.TextBlock{Text: "from the final message"}}}
	h.send(promptDoneMsg{msg: msg})
	if !strings.Contains(h.view(), "from the final message") {
		t.Errorf("view:\n%s", h.view())
	}
}

func TestModelErrors(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"failed", &musepi.PromptError{Kind: musepi.ErrPromptFailed, Detail: "401 invalid api key"}, "Error: 401 invalid api key"},
		{"plain", errors.New("boom"), "Error: boom"},
		{"aborted", &musepi.PromptError{Kind: musepi.ErrAborted, Detail: "aborted"}, "Aborted."},
		{"quit", fmt.Errorf("prompt: %w", context.Canceled), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.prompt("hello")
			h.send(promptDoneMsg{err: tc.err})
			last := h.m.entries[len(h.m.entries)-1]
			if tc.want == "" {
				if last.kind != userEntry {
					t.Errorf("extra line %q", last.text)
				}
				return
			}
			if last.text != tc.want || !strings.Contains(h.view(), tc.want) {
				t.Errorf("last line %q, want %q", last.text, tc.want)
			}
		})
	}
}

// The events of a turn that falls back, in the order the runtime sends
// them: the error that caused the fallback is shown above the fallback.
func TestModelFallbackShowsTheCauseFirst(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	failed := &musepi.AssistantMessage{StopReason: musepi.StopReasonError,
		ErrorMessage: "529 overloaded_error: Overloaded\nsecond line"}
	h.event(musepi.MessageEnd{Message: failed})
	h.event(musepi.AgentEnd{WillRetry: true, Message: failed})
	h.event(musepi.RetryFallbackApplied{From: "fake/m1", To: "fake/m2", Role: "default"})
	h.event(musepi.AutoRetryStart{Attempt: 1, MaxAttempts: 10, ErrorMessage: failed.ErrorMessage, ErrorClass: "transient"})
	v := h.view()
	cause, fallback := strings.Index(v, "⚠ 529 overloaded_error: Overloaded"), strings.Index(v, "⇄ Model fallback: fake/m1 → fake/m2")
	if cause < 0 || fallback < 0 || cause > fallback {
		t.Errorf("want the error above the fallback notice:\n%s", v)
	}
	if strings.Count(v, "⚠") != 1 || strings.Contains(v, "second line") {
		t.Errorf("want the error's first line once:\n%s", v)
	}
}

// A turn that is not retried shows no warning line: its error ends the
// prompt and is shown once, as the prompt's error.
func TestModelNoWarningWithoutRetry(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	h.event(musepi.AgentEnd{Message: &musepi.AssistantMessage{StopReason: musepi.StopReasonError,
		ErrorMessage: "400 invalid request"}})
	if v := h.view(); strings.Contains(v, "⚠") {
		t.Errorf("a warning for a turn that is not retried:\n%s", v)
	}
}

func TestModelFallbackNotice(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	h.event(musepi.RetryFallbackApplied{From: "fake/m1", To: "fake/m2", Role: "default"})
	v := h.view()
	if !strings.Contains(v, "Model fallback: fake/m1 → fake/m2") {
		t.Errorf("no fallback notice:\n%s", v)
	}
	if first := strings.SplitN(v, "\n", 2)[0]; !strings.Contains(first, "fake/m2") {
		t.Errorf("header %q does not name the fallback model", first)
	}
}

func TestModelCtrlC(t *testing.T) {
	for _, running := range []bool{false, true} {
		h := newHarness(t)
		if running {
			h.prompt("hello")
		}
		cmd := h.key("ctrl+c")
		if cmd == nil {
			t.Fatal("ctrl+c returned no command")
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("ctrl+c did not quit")
		}
		if want := map[bool]int{false: 0, true: 1}[running]; h.ctl.aborts != want {
			t.Errorf("running %v: %d aborts, want %d", running, h.ctl.aborts, want)
		}
	}
	h := newHarness(t)
	h.prompt("hello")
	if _, ok := h.send(quitMsg{})().(tea.QuitMsg); !ok || h.ctl.aborts != 1 {
		t.Errorf("quitMsg: aborts %d", h.ctl.aborts)
	}
}

func TestViewFitsWindow(t *testing.T) {
	h := newHarness(t)
	h.send(tea.WindowSizeMsg{Width: 40, Height: 12})
	h.prompt("hello")
	for i := 0; i < 30; i++ {
		h.event(musepi.MessageUpdate{Kind: "text", Delta: fmt.Sprintf("line %d of a long answer that wraps\n", i)})
	}
	h.retryStart(1, 10, 3*time.Second)
	lines := strings.Split(h.view(), "\n")
	if len(lines) != 12 {
		t.Errorf("%d lines, want 12:\n%s", len(lines), h.view())
	}
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > 40 {
			t.Errorf("line wider than 40 (%d): %q", w, l)
		}
	}
	if !strings.Contains(h.view(), "line 29 of a long") {
		t.Errorf("the end of the answer is not in view:\n%s", h.view())
	}
	// Page up leaves the end; a new delta does not jump back.
	h.send(tea.KeyMsg{Type: tea.KeyPgUp})
	h.event(musepi.MessageUpdate{Kind: "text", Delta: "more"})
	if strings.Contains(h.view(), "line 29 of a long") {
		t.Errorf("page up did not scroll:\n%s", h.view())
	}
}

// A rate_limit_wait counts down in the status line like a retry backoff,
// until its turn streams; esc cancels it (an abort on a first attempt).
func TestModelPacingWaitCountdown(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	if cmd := h.event(musepi.RateLimitWait{Delay: 2500 * time.Millisecond, Provider: "fake", Credential: "key-a", Limit: "input_tokens"}); cmd == nil {
		t.Error("rate_limit_wait: no tick scheduled")
	}
	for _, s := range []struct {
		advance time.Duration
		want    string
	}{
		{0, "Waiting for the rate limit (input tokens on key-a) 3s… (esc to cancel)"},
		{time.Second, "Waiting for the rate limit (input tokens on key-a) 2s… (esc to cancel)"},
		{2 * time.Second, "Waiting for the rate limit (input tokens on key-a)… (esc to cancel)"},
	} {
		h.clock = h.clock.Add(s.advance)
		h.send(retryTickMsg{seq: h.m.retry.seq})
		if got := h.statusLine(); !strings.HasSuffix(got, s.want) {
			t.Errorf("+%v: status %q, want %q", s.advance, got, s.want)
		}
	}
	h.key("esc")
	if h.ctl.aborts != 1 {
		t.Errorf("esc during a pacing wait: %d aborts, want 1", h.ctl.aborts)
	}
	h.event(musepi.MessageUpdate{Kind: "text", Delta: "hi"})
	if got := h.statusLine(); strings.Contains(got, "rate limit") {
		t.Errorf("status %q after the turn streamed; want the pacing line gone", got)
	}
}

// A capacity_wait shows in the status line until its turn streams.
func TestModelCapacityWait(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	h.event(musepi.CapacityWait{Provider: "fake", Model: "m1", Queued: 3})
	if got, want := h.statusLine(), "Waiting for capacity (fake/m1, 3 queued)… (esc to cancel)"; !strings.HasSuffix(got, want) {
		t.Errorf("status %q, want %q", got, want)
	}
	h.event(musepi.MessageUpdate{Kind: "text", Delta: "hi"})
	if got := h.statusLine(); strings.Contains(got, "capacity") {
		t.Errorf("status %q after the turn streamed; want the capacity line gone", got)
	}
}

// A retry that waits for a cooling model (a capacity_wait with none
// queued, then its auto_retry_start) says so in its countdown.
func TestModelCoolingWait(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	h.event(musepi.CapacityWait{Provider: "fake", Model: "m1", Delay: 75 * time.Second})
	h.event(musepi.AutoRetryStart{Attempt: 2, MaxAttempts: 10, Delay: 75 * time.Second})
	if got, want := h.statusLine(), "Retrying (2/10) in 75s, when fake/m1 has cooled down… (esc to cancel)"; !strings.HasSuffix(got, want) {
		t.Errorf("status %q, want %q", got, want)
	}
	h.event(musepi.AutoRetryStart{Attempt: 3, MaxAttempts: 10, Delay: time.Second})
	if got := h.statusLine(); strings.Contains(got, "cooled") {
		t.Errorf("status %q of a later retry that waits for no cooldown", got)
	}
}

// A compaction that lets the prompt go on says so; one that failed leaves
// it to the prompt's error.
func TestModelCompactionEnd(t *testing.T) {
	h := newHarness(t)
	h.prompt("hello")
	h.event(musepi.CompactionEnd{Reason: "overflow", ErrorMessage: "summary model unavailable"})
	if strings.Contains(h.view(), "Context compacted") {
		t.Errorf("a failed compaction shows as done:\n%s", h.view())
	}
	h.event(musepi.CompactionEnd{Reason: "overflow", WillRetry: true})
	if !strings.Contains(h.view(), "Context compacted: the prompt goes on") {
		t.Errorf("no notice of the compaction:\n%s", h.view())
	}
}
