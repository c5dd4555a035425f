package musepi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
)

// Every way a prompt ends without an answer matches an exported sentinel
// (errors.Is) and, where there is more to say, an exported type
// (errors.As): a user never matches error text.
func TestEveryPromptEndingHasAnExportedError(t *testing.T) {
	const overloaded = "503 Service Unavailable"
	tests := []struct {
		name string
		// run drives a fresh session to the ending and returns its error.
		run       func(h *harness, s *musepi.Session) error
		is        []error
		retry     bool // a *RetryError is attached
		limit     bool // a *LimitError is attached
		promptErr bool // a *PromptError is attached
	}{
		{"not retryable (400)", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), fail(400, "400 invalid request"))
			return h.runPrompt(s, "hi").err
		}, []error{musepi.ErrPromptFailed}, false, false, true},
		{"retries exhausted", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), fail(503, overloaded))
			return h.runPrompt(s, "hi").err
		}, []error{musepi.ErrPromptFailed}, true, false, true},
		{"wait over retry.maxDelayMs", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), fail(429, "429 Too Many Requests", "retry-after", "3600"))
			return h.runPrompt(s, "hi").err
		}, []error{musepi.ErrPromptFailed}, true, false, true},
		{"retry cancelled (AbortRetry)", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), fail(503, overloaded), answer("late"))
			ch := h.prompt(s, "hi")
			h.advance(100 * time.Millisecond)
			s.AbortRetry()
			h.run()
			return h.settle(ch).err
		}, []error{musepi.ErrRetryCancelled}, true, false, true},
		{"aborted (Abort)", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), provider.Outcome{Block: true})
			ch := h.prompt(s, "hi")
			s.Abort()
			h.run()
			return h.settle(ch).err
		}, []error{musepi.ErrAborted}, false, false, true},
		{"context overflow without a compaction hook", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), fail(400, "prompt is too long: 213462 tokens > 200000 maximum"))
			return h.runPrompt(s, "hi").err
		}, []error{musepi.ErrContextOverflow}, false, false, true},
		{"session busy", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), provider.Outcome{Block: true})
			first := h.prompt(s, "first")
			second := make(chan result, 1)
			go func() { msg, err := s.Prompt(context.Background(), "second"); second <- result{msg, err} }()
			err := h.settle(second).err
			s.Abort()
			h.run()
			h.settle(first)
			return err
		}, []error{musepi.ErrBusy}, false, false, true},
		{"session closed while the prompt waits", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), fail(503, overloaded), answer("late"))
			ch := h.prompt(s, "hi")
			h.advance(100 * time.Millisecond)
			if err := s.Close(context.Background()); err != nil {
				return err
			}
			return h.settle(ch).err
		}, []error{musepi.ErrShutdown, musepi.ErrSessionClosed}, false, false, true},
		{"runtime shut down while the prompt waits", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), fail(503, overloaded), answer("late"))
			ch := h.prompt(s, "hi")
			h.advance(100 * time.Millisecond)
			if err := h.rt.Shutdown(context.Background()); err != nil {
				return err
			}
			return h.settle(ch).err
		}, []error{musepi.ErrShutdown, musepi.ErrRuntimeClosed}, false, false, true},
		{"prompt on a closed session", func(h *harness, s *musepi.Session) error {
			if err := s.Close(context.Background()); err != nil {
				return err
			}
			_, err := s.Prompt(context.Background(), "hi")
			return err
		}, []error{musepi.ErrSessionClosed}, false, false, false},
		{"prompt after Shutdown", func(h *harness, s *musepi.Session) error {
			if err := h.rt.Shutdown(context.Background()); err != nil {
				return err
			}
			_, err := s.Prompt(context.Background(), "hi")
			return err
		}, []error{musepi.ErrRuntimeClosed}, false, false, false},
		{"prompt too large", func(h *harness, s *musepi.Session) error {
			_, err := s.Prompt(context.Background(), string(make([]byte, 2<<20)))
			return err
		}, []error{musepi.ErrLimitExceeded}, false, true, false},
		{"attach with no prompt", func(h *harness, s *musepi.Session) error {
			_, err := s.Attach(context.Background())
			return err
		}, []error{musepi.ErrNoPrompt}, false, false, true},
		{"attach to a prompt whose caller waits", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), provider.Outcome{Block: true})
			ch := h.prompt(s, "hi")
			_, err := s.Attach(context.Background())
			s.Abort()
			h.run()
			h.settle(ch)
			return err
		}, []error{musepi.ErrBusy}, false, false, true},
		{"caller's context cancelled", func(h *harness, s *musepi.Session) error {
			h.p.SetScript(s.ID(), provider.Outcome{Block: true})
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := s.Prompt(ctx, "hi")
			return err
		}, []error{context.Canceled}, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			settings := noFallback()
			settings.MaxRetries = 2
			h := newHarness(t, musepi.WithRetrySettings(settings))
			s, _ := h.session()
			err := tt.run(h, s)
			for _, want := range tt.is {
				if !errors.Is(err, want) {
					t.Errorf("error %v: errors.Is(err, %v) is false", err, want)
				}
			}
			var re *musepi.RetryError
			var le *musepi.LimitError
			var pe *musepi.PromptError
			if got := errors.As(err, &re); got != tt.retry {
				t.Errorf("error %v: *RetryError attached = %t, want %t", err, got, tt.retry)
			}
			if got := errors.As(err, &le); got != tt.limit {
				t.Errorf("error %v: *LimitError attached = %t, want %t", err, got, tt.limit)
			}
			if got := errors.As(err, &pe); got != tt.promptErr {
				t.Errorf("error %v: *PromptError attached = %t, want %t", err, got, tt.promptErr)
			}
		})
	}
}
