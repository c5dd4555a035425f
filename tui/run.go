// Package tui is MusePi's interactive terminal UI: a prompt line, the answer
// streamed in, and the session's auto-retry shown live (a countdown that Esc
// cancels). See README.md for the keys.
package tui

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/musepi/musepi"
)

// settleWait bounds how long a finished prompt waits for its agent_settled
// event to reach the UI, so that the prompt's own events are shown first.
const settleWait = 2 * time.Second

// Run shows the chat UI for s, reading keys from in and drawing on out (a
// terminal), until the user quits with Ctrl-C or ctx ends; either way a
// running prompt is aborted and Run returns nil. Each prompt runs
// s.Prompt in a goroutine; the session's events are forwarded into the UI
// from the subscriber goroutine. When the UI has closed, the transcript is
// written to out.
func Run(ctx context.Context, s *musepi.Session, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		p       *tea.Program
		wg      sync.WaitGroup
		settled = make(chan struct{}, 1)
	)
	start := func(text string) {
		drainSettled(settled) // left over from an earlier prompt
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := s.Prompt(ctx, text)
			awaitSettled(ctx, settled)
			p.Send(promptDoneMsg{msg: msg, err: err})
		}()
	}

	p = newProgram(newModel(s, start, s.Model()), in, out)
	unsubscribe := forwardEvents(s, p, settled)
	defer unsubscribe()
	stopQuitting := quitWhenDone(ctx, p)

	final, err := p.Run()
	stopQuitting()
	cancel() // a prompt still running returns (aborted)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("tui: %w", err)
	}
	writeTranscript(out, final)
	return nil
}

// newProgram is the full-screen program of m, reading keys from in and
// drawing on out.
func newProgram(m model, in io.Reader, out io.Writer) *tea.Program {
	return tea.NewProgram(m,
		tea.WithInput(in),
		tea.WithOutput(out),
		tea.WithAltScreen(),
		tea.WithoutSignalHandler(), // the caller's ctx carries the signals
	)
}

// forwardEvents sends s's events to p from the subscriber goroutine and
// signals settled once an agent_settled was handed over; it returns the
// unsubscribe function.
func forwardEvents(s *musepi.Session, p *tea.Program, settled chan<- struct{}) (unsubscribe func()) {
	return s.Subscribe(func(ev musepi.Event) {
		p.Send(eventMsg{ev: ev})
		if _, ok := ev.(musepi.AgentSettled); ok {
			select {
			case settled <- struct{}{}:
			default:
			}
		}
	})
}

// drainSettled drops a pending settle signal, if any.
func drainSettled(settled <-chan struct{}) {
	select {
	case <-settled:
	default:
	}
}

// awaitSettled waits until the subscriber has handed the prompt's
// agent_settled to the program (its last event: every earlier one,
// auto_retry_end, ..., is then in the UI too), at most settleWait or until
// ctx ends.
func awaitSettled(ctx context.Context, settled <-chan struct{}) {
	timer := time.NewTimer(settleWait)
	defer timer.Stop()
	select {
	case <-settled:
	case <-timer.C:
	case <-ctx.Done():
	}
}

// quitWhenDone asks p to quit when ctx ends, until the returned stop is
// called.
func quitWhenDone(ctx context.Context, p *tea.Program) (stop func()) {
	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			p.Send(quitMsg{})
		case <-finished:
		}
	}()
	return func() { close(finished) }
}

// writeTranscript writes the transcript of the program's final model to
// out, if there is one.
func writeTranscript(out io.Writer, final tea.Model) {
	if fm, ok := final.(model); ok {
		if t := fm.transcript(fm.width); t != "" {
			fmt.Fprintln(out, t)
		}
	}
}
