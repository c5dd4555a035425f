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
		// Drop a settle signal left over from an earlier prompt.
		select {
		case <-settled:
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, err := s.Prompt(ctx, text)
			// agent_settled is the prompt's last event; once the
			// subscriber has handed it to the program, every earlier
			// event (auto_retry_end, ...) is in the UI too.
			timer := time.NewTimer(settleWait)
			defer timer.Stop()
			select {
			case <-settled:
			case <-timer.C:
			case <-ctx.Done():
			}
			p.Send(promptDoneMsg{msg: msg, err: err})
		}()
	}

	m := newModel(s, start, s.Model())
	p = tea.NewProgram(m,
		tea.WithInput(in),
		tea.WithOutput(out),
		tea.WithAltScreen(),
		tea.WithoutSignalHandler(), // the caller's ctx carries the signals
	)

	unsubscribe := s.Subscribe(func(ev musepi.Event) {
		p.Send(eventMsg{ev: ev})
		if _, ok := ev.(musepi.AgentSettled); ok {
			select {
			case settled <- struct{}{}:
			default:
			}
		}
	})
	defer unsubscribe()

	finished := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			p.Send(quitMsg{})
		case <-finished:
		}
	}()

	final, err := p.Run()
	close(finished)
	cancel() // a prompt still running returns (aborted)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("tui: %w", err)
	}
	if fm, ok := final.(model); ok {
		if t := fm.transcript(fm.width); t != "" {
			fmt.Fprintln(out, t)
		}
	}
	return nil
}
