package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/internal/retrytally"
	"github.com/musepi/musepi/retry"
)

// countdownEvery is how often a live countdown is redrawn.
const countdownEvery = 100 * time.Millisecond

// demoPrinter prints the demo's runs. Events arrive from the sessions'
// subscriber goroutines; every write holds mu. On a terminal (live) the
// backoff countdown is redrawn in place; elsewhere it is printed once.
type demoPrinter struct {
	mu      sync.Mutex
	out     io.Writer
	live    bool
	now     func() time.Time
	cur     *demoRun   // the run in progress
	cd      *countdown // the countdown on screen, or nil
	stopped bool       // after Ctrl-C: events print nothing more
	wg      sync.WaitGroup
}

func newDemoPrinter(out io.Writer, live bool) *demoPrinter {
	return &demoPrinter{out: out, live: live, now: time.Now}
}

// line prints one line (format and args as fmt.Printf).
func (p *demoPrinter) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printf(format, args...)
}

// printf prints one line; p.mu is held.
func (p *demoPrinter) printf(format string, args ...any) {
	fmt.Fprintf(p.out, format+"\n", args...)
}

// demoRun is one prompt being shown: its figures for the summary.
type demoRun struct {
	p        *demoPrinter
	ctx      context.Context // ends at Ctrl-C
	model    string          // the model in use, as the events say
	settled  chan struct{}
	began    time.Time
	text     strings.Builder
	failure  *musepi.AssistantMessage // the last failed turn
	fellBack bool                     // a model fallback came just before this retry
	ended    bool                     // auto_retry_end printed the outcome of a failure
	doing    string                   // what is going on, for the interrupt line
	tally    retrytally.Tally         // the retries made (docs/retry-policy.md, "Terms")

	calls, switches, fallbacks int
	backoff                    time.Duration // time spent in backoff
}

// begin starts showing a prompt on a session whose model is model until
// ctx ends; settled is closed on its agent_settled.
func (p *demoPrinter) begin(ctx context.Context, model string, settled chan struct{}) *demoRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &demoRun{p: p, ctx: ctx, model: model, settled: settled, began: p.now()}
	p.cur = r
	return r
}

// event prints one session event.
func (r *demoRun) event(ev musepi.Event) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := ev.(musepi.AgentSettled); ok {
		close(r.settled)
	}
	if r.ctx.Err() != nil { // the events of the abort Ctrl-C made
		r.stopLocked()
	}
	if p.stopped {
		return
	}
	r.tally.Add(ev)
	switch e := ev.(type) {
	case musepi.AgentStart:
		p.endCountdown("")
		r.calls++
		r.doing = "waiting for " + r.model
		p.printf("  → calling %s", r.model)
	case musepi.AgentEnd:
		if m := e.Message; m != nil && m.StopReason == musepi.StopReasonError {
			r.failure = m
			p.printf("  ✗ %s", firstLine(m.ErrorMessage))
		}
	case musepi.RetryFallbackApplied:
		r.fallbacks++
		r.fellBack = true
		r.model = e.To
		p.printf("  ⇄ model fallback %s → %s", e.From, e.To)
	case musepi.ModelChanged:
		r.model = e.To
	case musepi.AutoRetryStart:
		r.retryStart(e)
	case musepi.AutoRetryEnd:
		r.retryEnd(e)
	case musepi.MessageUpdate:
		if e.Kind == "text" {
			r.text.WriteString(e.Delta)
		}
	case musepi.AgentSettled:
		p.endCountdown("")
	}
}

// retryStart prints an auto_retry_start: at once after a switch, else a
// countdown of the backoff.
func (r *demoRun) retryStart(e musepi.AutoRetryStart) {
	p := r.p
	fellBack := r.fellBack
	r.fellBack = false
	attempt := fmt.Sprintf("retry %d/%d", e.Attempt, e.MaxAttempts)
	delay := e.Delay
	switch {
	case delay == 0 && fellBack:
		p.printf("  ⟳ %s at once, on the fallback model", attempt)
	case delay == 0 && e.ErrorClass == "usage_limit":
		r.switches++
		p.printf("  ⇄ key over its usage limit: %s at once, with the next API key", attempt)
	case delay == 0:
		p.printf("  ⟳ %s at once", attempt)
	default:
		r.doing = "in the backoff before " + attempt
		p.startCountdown(attempt, r.why(delay), delay)
	}
}

// retryEnd prints how a chain ended, with the retries it made.
func (r *demoRun) retryEnd(e musepi.AutoRetryEnd) {
	p := r.p
	p.endCountdown("")
	n := r.tally.Ended()
	if e.Success {
		p.printf("  ✓ recovered after %d %s", n, plural(n, "retry", "retries"))
	} else {
		r.ended = true
		p.printf("  ✗ Retry failed after %d %s: %s", n, plural(n, "attempt", "attempts"), firstLine(e.FinalError))
	}
}

// why says where a backoff comes from: the provider's hint when it set
// the delay, else the exponential backoff.
func (r *demoRun) why(delay time.Duration) string {
	m := r.failure
	if m == nil {
		return "exponential backoff with jitter"
	}
	if h, ok := retry.ParseHint(m.Headers, m.ErrorMessage, r.p.now()); ok && delay >= h.Delay-time.Second {
		if v, ok := headerValue(m.Headers, h.Source); ok {
			return fmt.Sprintf("the provider's %s: %s honoured", h.Source, v)
		}
		return "the delay the provider's error asks for"
	}
	return "exponential backoff with jitter"
}

// headerValue is headers[name], names compared without case.
func headerValue(headers map[string]string, name string) (string, bool) {
	for k, v := range headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// finish prints the outcome of the prompt and the run's summary.
func (r *demoRun) finish(msg *musepi.AssistantMessage, err error) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endCountdown("")
	switch {
	case err == nil:
		answer := r.text.String()
		if answer == "" {
			answer = msg.Text()
		}
		p.printf("  answer (%s): %s", r.model, answer)
	case !r.ended:
		text := err.Error()
		var pe *musepi.PromptError
		if errors.As(err, &pe) && pe.Detail != "" {
			text = pe.Detail
		}
		p.printf("  ✗ %s", firstLine(text))
	}
	p.printf("  ⏱ %s", r.summary())
	p.cur = nil
}

// summary is the run's figures in one line: its calls (agent_start) and
// the retries made, a pending one not counted.
func (r *demoRun) summary() string {
	parts := []string{
		fmt.Sprintf("%.1f s", r.p.now().Sub(r.began).Seconds()),
		fmt.Sprintf("%d %s", r.calls, plural(r.calls, "call", "calls")),
		fmt.Sprintf("%d %s (%.1f s of backoff)", r.tally.Made(), plural(r.tally.Made(), "retry", "retries"), r.backoff.Seconds()),
	}
	if r.switches > 0 {
		parts = append(parts, fmt.Sprintf("%d credential %s", r.switches, plural(r.switches, "switch", "switches")))
	}
	if r.fallbacks > 0 {
		parts = append(parts, fmt.Sprintf("%d model %s", r.fallbacks, plural(r.fallbacks, "fallback", "fallbacks")))
	}
	return strings.Join(parts, ", ")
}

// stop ends the printing of the run in progress: after Ctrl-C no event
// prints anything more.
func (r *demoRun) stop() {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.stopLocked()
}

// stopLocked is stop with p.mu held.
func (r *demoRun) stopLocked() {
	r.p.endCountdown("cancelled")
	r.p.stopped = true
}

// interrupted prints the summary of a demo stopped by Ctrl-C, and waits
// for the countdown goroutines.
func (p *demoPrinter) interrupted() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endCountdown("cancelled")
	p.stopped = true
	doing, summary := "between scenarios", ""
	if r := p.cur; r != nil {
		doing, summary = r.doing, ": "+r.summary()
		if doing == "" {
			doing = "before the first call"
		}
	}
	p.printf("■ Interrupted %s; the prompt was aborted and nothing more is sent%s", doing, summary)
}

// close waits for the countdown goroutines to end.
func (p *demoPrinter) close() {
	p.mu.Lock()
	p.endCountdown("")
	p.mu.Unlock()
	p.wg.Wait()
}

// countdown is a backoff being counted down.
type countdown struct {
	attempt, why string
	began        time.Time
	delay        time.Duration
	quit         chan struct{}
}

// text is the countdown's line at now.
func (c *countdown) text(now time.Time) string {
	left := max(0, c.delay-now.Sub(c.began)).Seconds()
	left = math.Ceil(left*10) / 10
	return fmt.Sprintf("  ⏳ %s in %.1fs (%s)", c.attempt, left, c.why)
}

// startCountdown shows a backoff of delay; p.mu is held.
func (p *demoPrinter) startCountdown(attempt, why string, delay time.Duration) {
	p.endCountdown("")
	c := &countdown{attempt: attempt, why: why, began: p.now(), delay: delay, quit: make(chan struct{})}
	p.cd = c
	if !p.live {
		p.printf("%s", c.text(c.began))
		return
	}
	fmt.Fprint(p.out, c.text(c.began))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(countdownEvery)
		defer tick.Stop()
		for {
			select {
			case <-c.quit:
				return
			case <-tick.C:
				p.mu.Lock()
				if p.cd == c {
					fmt.Fprint(p.out, "\r\x1b[K"+c.text(p.now()))
				}
				p.mu.Unlock()
			}
		}
	}()
}

// endCountdown ends the countdown on screen, if any, and counts the time
// it waited; a non-empty note ("cancelled") says why it ended early.
// p.mu is held.
func (p *demoPrinter) endCountdown(note string) {
	c := p.cd
	if c == nil {
		return
	}
	p.cd = nil
	waited := min(c.delay, p.now().Sub(c.began))
	if p.cur != nil {
		p.cur.backoff += waited
	}
	if p.live {
		close(c.quit)
		fmt.Fprintf(p.out, "\r\x1b[K  ⏳ %s after %.1fs (%s)", c.attempt, waited.Seconds(), c.why)
		if note != "" {
			fmt.Fprintf(p.out, ": %s", note)
		}
		fmt.Fprintln(p.out)
	} else if note != "" {
		p.printf("  ⏳ %s %s after %.1fs", c.attempt, note, waited.Seconds())
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
