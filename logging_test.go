package musepi_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
)

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WithLogger takes a *slog.Logger: the runtime's own lines and
// protoactor-go's reach it. Aborting prompts mid-stream, closing their
// sessions, and aborts that arrive after the close (protoactor dead
// letters, which it logs at info) log no DeadLetter line, even with the
// logger at debug level.
func TestWithLoggerAndNoDeadLetterNoise(t *testing.T) {
	out := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt, err := musepi.NewRuntime(musepi.WithLogger(log),
		musepi.WithProvider("p", provider.NewScripted(provider.Outcome{Deltas: []provider.Delta{{Kind: "text", Text: "partial"}}, Block: true})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		s, err := rt.NewSession(ctx, musepi.WithModel("p/m"))
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		unsubscribe := s.Subscribe(func(ev musepi.Event) {
			if _, ok := ev.(musepi.MessageUpdate); ok {
				close(started)
			}
		})
		done := make(chan error, 1)
		go func() { _, err := s.Prompt(ctx, "hi"); done <- err }()
		<-started
		unsubscribe()
		if i%2 == 0 {
			s.Abort()
			if err := <-done; !errors.Is(err, musepi.ErrAborted) {
				t.Fatalf("prompt after Abort = %v, want ErrAborted", err)
			}
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		s.Abort() // an abort racing the close reaches no session: a dead letter
		if i%2 == 1 {
			if err := <-done; !errors.Is(err, musepi.ErrShutdown) || !errors.Is(err, musepi.ErrSessionClosed) {
				t.Fatalf("prompt after Close = %v, want ErrShutdown and ErrSessionClosed", err)
			}
		}
	}
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // protoactor's dead-letter throttle window
	if text := out.String(); strings.Contains(text, "DeadLetter") || strings.Contains(text, "lib=protoactor") && strings.Contains(text, "level=INFO") {
		t.Errorf("dead-letter noise in the log:\n%s", text)
	}
}
