package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/spinner"
	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/retrytally"
)

// controls is what the model asks of the session; *musepi.Session has it.
type controls interface {
	Abort()
	AbortRetry()
	IsRetrying() bool
}

// Messages the model handles besides keys, window sizes and spinner ticks.
type (
	// eventMsg is one session event (musepi.AutoRetryStart, ...).
	eventMsg struct{ ev musepi.Event }
	// promptDoneMsg says the running Prompt returned (after its events).
	promptDoneMsg struct {
		msg *musepi.AssistantMessage
		err error
	}
	// retryTickMsg redraws the countdown of retry chain step seq.
	retryTickMsg struct{ seq int }
	// quitMsg asks the model to quit as Ctrl-C does (the context ended).
	quitMsg struct{}
)

type entryKind int

const (
	userEntry entryKind = iota
	answerEntry
	thinkingEntry
	noticeEntry
	errorEntry
)

// entry is one block of the transcript.
type entry struct {
	kind entryKind
	text string
}

// retryState is the retry line between auto_retry_start and auto_retry_end,
// or the pacing line of a rate_limit_wait or a capacity_wait until its
// turn goes out.
type retryState struct {
	attempt, max int
	deadline     time.Time
	seq          int
	held         bool   // the provider's retry budget extended the delay
	cooling      string // the model a retry waits for out of its cooldown (a capacity_wait with none queued)
	pacing       string // a rate_limit_wait's limit and key, a capacity_wait's model and queue ("": a retry)
	capacity     bool   // pacing is a capacity_wait's
}

var (
	headerStyle   = lipgloss.NewStyle().Bold(true)
	userStyle     = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12"))
	thinkingStyle = lipgloss.NewStyle().Faint(true).Italic(true)
	noticeStyle   = lipgloss.NewStyle().Faint(true)
	errorStyle    = lipgloss.NewStyle().Foreground(lipgloss.Color("9"))
	retryStyle    = lipgloss.NewStyle().Foreground(lipgloss.Color("11"))
	helpStyle     = lipgloss.NewStyle().Faint(true)
)

const helpText = "enter send · esc cancel retry / abort · pgup/pgdn scroll · ctrl+c quit"

// model is the bubbletea model of the chat. Side effects go through ctl
// (Abort, AbortRetry) and start (runs a prompt in the background and later
// delivers a promptDoneMsg), so tests drive it with synthetic messages.
type model struct {
	ctl       controls
	start     func(text string)
	now       func() time.Time
	modelName string

	input   textinput.Model
	spin    spinner.Model
	vp      viewport.Model
	width   int
	height  int
	entries []entry

	running     bool        // a prompt is in flight
	retry       *retryState // the retry line, nil when none
	retrySeq    int
	retryFailed bool             // the running prompt's retry chain failed and was shown
	tally       retrytally.Tally // the retries made (docs/retry-policy.md, "Terms")
	answered    bool             // the running prompt streamed some answer text
	open        int              // index of the entry a text delta appends to, -1 for none
	openKind    entryKind
	quitting    bool
}

func newModel(ctl controls, start func(string), modelName string) model {
	in := textinput.New()
	in.Prompt = "> "
	in.Placeholder = "Type a prompt and press Enter"
	in.Focus()
	vp := viewport.New(80, 20)
	vp.KeyMap = viewport.KeyMap{
		PageDown: key.NewBinding(key.WithKeys("pgdown")),
		PageUp:   key.NewBinding(key.WithKeys("pgup")),
	}
	m := model{
		ctl:       ctl,
		start:     start,
		now:       time.Now,
		modelName: modelName,
		input:     in,
		spin:      spinner.New(spinner.WithSpinner(spinner.Dot)),
		vp:        vp,
		open:      -1,
	}
	m.resize(80, 24)
	return m
}

func (m model) Init() tea.Cmd { return textinput.Blink }

func (m *model) resize(w, h int) {
	m.width, m.height = w, h
	m.input.Width = max(w-len(m.input.Prompt)-1, 1)
	m.vp.Width = w
	m.vp.Height = max(h-4, 1) // header, status, input, help
	m.refresh()
}

// refresh re-renders the transcript into the viewport, following the end
// unless the user scrolled up.
func (m *model) refresh() {
	follow := m.vp.AtBottom()
	m.vp.SetContent(m.transcript(m.width))
	if follow {
		m.vp.GotoBottom()
	}
}

// transcript renders the entries wrapped to width.
func (m *model) transcript(width int) string {
	var b strings.Builder
	for i, e := range m.entries {
		if e.kind == userEntry && i > 0 {
			b.WriteString("\n")
		}
		text := e.text
		var style lipgloss.Style
		switch e.kind {
		case userEntry:
			text, style = "> "+text, userStyle
		case answerEntry:
			text = strings.TrimRight(text, "\n")
		case thinkingEntry:
			text, style = strings.TrimRight(text, "\n"), thinkingStyle
		case noticeEntry:
			style = noticeStyle
		case errorEntry:
			style = errorStyle
		}
		if width > 0 {
			text = ansi.Wrap(text, width, "")
		}
		if e.kind != answerEntry {
			text = style.Render(text)
		}
		b.WriteString(text)
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (m *model) add(kind entryKind, text string) {
	m.entries = append(m.entries, entry{kind: kind, text: text})
	m.open = -1
	m.refresh()
}

// appendDelta streams text into the open entry of kind, or a new one.
func (m *model) appendDelta(kind entryKind, delta string) {
	if m.open < 0 || m.openKind != kind {
		m.entries = append(m.entries, entry{kind: kind})
		m.open, m.openKind = len(m.entries)-1, kind
	}
	m.entries[m.open].text += delta
	m.refresh()
}

// remaining is the countdown of the retry line, rounded up to whole seconds.
func (r *retryState) remaining(now time.Time) int {
	left := r.deadline.Sub(now)
	if left <= 0 {
		return 0
	}
	return int((left + time.Second - 1) / time.Second)
}

// nextTick is how long until the countdown shows one second less; 0 when it
// has run out.
func (r *retryState) nextTick(now time.Time) time.Duration {
	secs := r.remaining(now)
	if secs == 0 {
		return 0
	}
	return r.deadline.Sub(now) - time.Duration(secs-1)*time.Second
}

// retryLine is the status line while a retry chain is open, or a turn
// waits for its key's rate-limit budget.
func (r *retryState) line(now time.Time) string {
	what := "the rate limit"
	if r.capacity {
		what = "capacity"
	}
	if r.pacing != "" {
		if secs := r.remaining(now); secs > 0 {
			return fmt.Sprintf("Waiting for %s (%s) %ds… (esc to cancel)", what, r.pacing, secs)
		}
		return fmt.Sprintf("Waiting for %s (%s)… (esc to cancel)", what, r.pacing)
	}
	if secs := r.remaining(now); secs > 0 {
		if r.held {
			return fmt.Sprintf("Retrying (%d/%d) in %ds, held by the retry budget… (esc to cancel)", r.attempt, r.max, secs)
		}
		if r.cooling != "" {
			return fmt.Sprintf("Retrying (%d/%d) in %ds, when %s has cooled down… (esc to cancel)", r.attempt, r.max, secs, r.cooling)
		}
		return fmt.Sprintf("Retrying (%d/%d) in %ds… (esc to cancel)", r.attempt, r.max, secs)
	}
	return fmt.Sprintf("Retrying (%d/%d)… (esc to cancel)", r.attempt, r.max)
}

func (m *model) tickCmd() tea.Cmd {
	if m.retry == nil {
		return nil
	}
	d := m.retry.nextTick(m.now())
	if d <= 0 {
		return nil
	}
	seq := m.retry.seq
	return tea.Tick(d, func(time.Time) tea.Msg { return retryTickMsg{seq: seq} })
}

// retryFailedLine is the line shown when a retry chain ends without
// success, after the given number of retries made (their calls went out).
func retryFailedLine(retries int, finalError string) string {
	return fmt.Sprintf("Retry failed after %d %s: %s", retries, plural(retries, "attempt", "attempts"), finalError)
}

func (m model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.resize(msg.Width, msg.Height)
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	case eventMsg:
		return m.event(msg.ev)
	case promptDoneMsg:
		m.finish(msg)
		return m, nil
	case retryTickMsg:
		if m.retry == nil || msg.seq != m.retry.seq {
			return m, nil
		}
		return m, m.tickCmd()
	case quitMsg:
		return m.quit()
	case spinner.TickMsg:
		if !m.running {
			return m, nil // let the spinner stop until the next prompt
		}
		var cmd tea.Cmd
		m.spin, cmd = m.spin.Update(msg)
		return m, cmd
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return m, cmd
}

func (m model) quit() (tea.Model, tea.Cmd) {
	if m.running {
		m.ctl.Abort()
	}
	m.quitting = true
	return m, tea.Quit
}

func (m model) key(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	switch msg.String() {
	case "ctrl+c":
		return m.quit()
	case "esc":
		switch {
		case m.ctl.IsRetrying():
			m.ctl.AbortRetry()
		case m.running:
			m.ctl.Abort()
		}
		return m, nil
	case "enter":
		text := strings.TrimSpace(m.input.Value())
		if text == "" || m.running {
			return m, nil
		}
		m.input.Reset()
		m.add(userEntry, text)
		m.running, m.retryFailed, m.answered, m.retry = true, false, false, nil
		m.start(text)
		return m, m.spin.Tick
	case "pgup", "pgdown":
		var cmd tea.Cmd
		m.vp, cmd = m.vp.Update(msg)
		return m, cmd
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return m, cmd
}

// event shows a session event: in the transcript, the model's name and the
// retry or pacing wait under way.
func (m model) event(ev musepi.Event) (tea.Model, tea.Cmd) {
	m.tally.Add(ev)
	if m.countdown(ev) {
		return m, m.tickCmd()
	}
	m.show(ev)
	return m, nil
}

// countdown starts or moves the status line's countdown of a retry or a
// pacing wait for ev, and reports whether it did (tickCmd redraws it).
func (m *model) countdown(ev musepi.Event) bool {
	switch p := ev.(type) {
	case musepi.AutoRetryStart:
		m.startRetry(p)
		return true
	case musepi.RetryReleased:
		return m.releaseRetry(p)
	case musepi.RateLimitWait:
		m.startPacingWait(p)
		return true
	case musepi.CapacityWait:
		m.startCapacityWait(p)
		return true
	}
	return false
}

// show shows an event that starts no countdown: in the transcript, and the
// model's name.
func (m *model) show(ev musepi.Event) {
	switch p := ev.(type) {
	case musepi.AgentStart:
		m.open = -1
	case musepi.MessageUpdate:
		m.endPacingWait()
		switch p.Kind {
		case "text":
			m.answered = true
			m.appendDelta(answerEntry, p.Delta)
		case "thinking":
			m.appendDelta(thinkingEntry, p.Delta)
		}
	case musepi.MessageEnd:
		m.endPacingWait()
		m.open = -1
	case musepi.AgentEnd:
		m.open = -1
		m.showRetriedError(p)
	case musepi.AutoRetryEnd:
		m.endRetry(p)
	case musepi.RetryFallbackApplied:
		m.modelName = p.To
		m.add(noticeEntry, fmt.Sprintf("⇄ Model fallback: %s → %s", p.From, p.To))
	case musepi.RetryFallbackSucceeded:
		m.modelName = p.Model
	case musepi.ModelChanged:
		m.modelName = p.To
	default:
		if text := notice(ev); text != "" {
			m.add(noticeEntry, text)
		}
	}
}

// notice is the line an event that only informs shows in the transcript;
// "" for one that shows nothing.
func notice(ev musepi.Event) string {
	switch p := ev.(type) {
	case musepi.CompactionRequired:
		return "Context window full: " + firstLine(p.ErrorMessage)
	case musepi.CompactionEnd:
		if p.WillRetry {
			return "Context compacted: the prompt goes on"
		}
	case musepi.EventsLost:
		return fmt.Sprintf("(%d events were lost)", p.Count)
	case musepi.HostLost:
		return fmt.Sprintf("⚠ Host %s lost: waiting for another node to take the session over", p.Member)
	case musepi.Resumed:
		return "↻ Resumed on " + p.Member
	}
	return ""
}

// showRetriedError shows the error of a turn that will be retried. It
// comes before retry_fallback_applied and auto_retry_start: the cause comes
// before what is done about it. A turn not retried ends the prompt, whose
// error finish shows.
func (m *model) showRetriedError(p musepi.AgentEnd) {
	if p.WillRetry && p.Message != nil {
		if e := firstLine(p.Message.ErrorMessage); e != "" {
			m.add(noticeEntry, "⚠ "+e)
		}
	}
}

// startRetry opens the retry line of an auto_retry_start, whose countdown
// tickCmd then redraws.
func (m *model) startRetry(p musepi.AutoRetryStart) {
	var cooling string
	if r := m.retry; r != nil && r.capacity && r.cooling != "" {
		cooling = r.cooling // the capacity_wait this retry waits out
	}
	m.retrySeq++
	m.retry = &retryState{
		attempt:  p.Attempt,
		max:      p.MaxAttempts,
		deadline: m.now().Add(p.Delay),
		seq:      m.retrySeq,
		held:     p.BudgetDelay > 0,
		cooling:  cooling,
	}
}

// releaseRetry moves the countdown of the retry line that the retry
// budget held to what a retry_released leaves of it; it reports whether
// the line is that retry's.
func (m *model) releaseRetry(p musepi.RetryReleased) bool {
	r := m.retry
	if r == nil || r.pacing != "" || r.attempt != p.Attempt {
		return false
	}
	m.retrySeq++
	r.deadline, r.seq, r.held = m.now().Add(p.Delay), m.retrySeq, false
	return true
}

// startPacingWait shows a rate_limit_wait's countdown in the status line
// until its turn goes out.
func (m *model) startPacingWait(p musepi.RateLimitWait) {
	m.retrySeq++
	m.retry = &retryState{deadline: m.now().Add(p.Delay), seq: m.retrySeq,
		pacing: fmt.Sprintf("%s on %s", strings.ReplaceAll(p.Limit, "_", " "), p.Credential)}
}

// startCapacityWait shows a capacity_wait in the status line (counting
// down when it says how long) until its turn goes out.
func (m *model) startCapacityWait(p musepi.CapacityWait) {
	m.retrySeq++
	m.retry = &retryState{deadline: m.now().Add(p.Delay), seq: m.retrySeq, capacity: true,
		pacing: fmt.Sprintf("%s/%s, %d queued", p.Provider, p.Model, p.Queued)}
	if p.Queued == 0 { // a retry waits for a cooling model: its auto_retry_start follows
		m.retry.pacing = fmt.Sprintf("%s/%s cooling down", p.Provider, p.Model)
		m.retry.cooling = p.Provider + "/" + p.Model
	}
}

// endPacingWait closes the pacing line once the turn streams.
func (m *model) endPacingWait() {
	if m.retry != nil && m.retry.pacing != "" {
		m.retry = nil
	}
}

// endRetry closes the retry line at auto_retry_end and shows how the chain
// ended, with the retries it made: recovered, or the failure line.
func (m *model) endRetry(p musepi.AutoRetryEnd) {
	m.retry = nil
	n := m.tally.Ended()
	if p.Success {
		m.add(noticeEntry, fmt.Sprintf("✓ Recovered after %d %s", n, plural(n, "retry", "retries")))
	} else {
		m.retryFailed = true
		m.add(errorEntry, retryFailedLine(n, p.FinalError))
	}
}

// finish ends the running prompt: the answer if none streamed, or its error.
func (m *model) finish(d promptDoneMsg) {
	m.running, m.retry, m.open = false, nil, -1
	err := d.err
	switch {
	case err == nil:
		if !m.answered {
			if text := d.msg.Text(); text != "" {
				m.add(answerEntry, text)
			}
		}
	case errors.Is(err, context.Canceled), m.retryFailed:
		// Quitting, or the retry failure line already says it.
	case errors.Is(err, musepi.ErrAborted):
		m.add(noticeEntry, "Aborted.")
	default:
		text := err.Error()
		var pe *musepi.PromptError
		if errors.As(err, &pe) && pe.Detail != "" {
			text = pe.Detail
		}
		m.add(errorEntry, "Error: "+text)
	}
	m.refresh()
}

// status is the line above the input: the retry countdown, the working
// spinner, or nothing.
func (m model) status() string {
	switch {
	case m.retry != nil:
		line := m.retry.line(m.now())
		if m.retry.remaining(m.now()) == 0 {
			line = m.spin.View() + line
		}
		return retryStyle.Render(line)
	case m.running:
		return m.spin.View() + "Working… (esc to abort)"
	}
	return ""
}

func (m model) View() string {
	header := "MusePi chat"
	if m.modelName != "" {
		header += " · " + m.modelName
	}
	return strings.Join([]string{
		headerStyle.Render(ansi.Truncate(header, m.width, "…")),
		m.vp.View(),
		ansi.Truncate(m.status(), m.width, "…"),
		m.input.View(),
		helpStyle.Render(ansi.Truncate(helpText, m.width, "…")),
	}, "\n")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return ansi.Truncate(line, 160, "…")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
