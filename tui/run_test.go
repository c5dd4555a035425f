package tui

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"go.uber.org/goleak"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/provider"
	"github.com/musepi/musepi/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Timer commands bubbletea leaves running after the program quits;
		// each ends within a second (countdown tick, cursor blink).
		goleak.IgnoreTopFunction("github.com/charmbracelet/bubbletea.Tick.func1"),
		goleak.IgnoreTopFunction("github.com/charmbracelet/bubbles/cursor.(*Model).BlinkCmd.func1"),
	)
}

// screen collects what Run draws.
type screen struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ansi.Strip(s.buf.String())
}

func (s *screen) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.text(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the output never showed %q:\n%s", want, s.text())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRun runs the UI on a session of a scripted provider, typing through
// a pipe; it returns the writer of keys, the screen and Run's result.
func startRun(t *testing.T, baseDelay time.Duration, script ...provider.Outcome) (context.CancelFunc, io.Writer, *screen, <-chan error) {
	t.Helper()
	settings := retry.DefaultSettings()
	settings.BaseDelay = baseDelay
	rt, err := musepi.NewRuntime(musepi.WithProvider("demo", provider.NewScripted(script...)), musepi.WithRetrySettings(settings))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := rt.NewSession(ctx, musepi.WithModel("demo/m1"))
	if err != nil {
		t.Fatal(err)
	}
	keysR, keysW := io.Pipe()
	t.Cleanup(func() { _ = keysW.Close() })
	out := &screen{}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, s, keysR, out) }()
	out.waitFor(t, "ctrl+c quit")
	return cancel, keysW, out, done
}

func waitRun(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s")
	}
}

func TestTUIRunRecoversAndQuitsOnContext(t *testing.T) {
	cancel, keys, out, done := startRun(t, 1500*time.Millisecond,
		provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)},
		provider.Outcome{Message: provider.Text("Hello!")},
	)
	if _, err := io.WriteString(keys, "hello\r"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "Retrying (1/10) in ")
	out.waitFor(t, "✓ Recovered after 1 retry")
	out.waitFor(t, "Hello!")
	cancel() // as SIGTERM does in musepi chat
	waitRun(t, done)
	// The transcript is printed once the UI has closed.
	text := out.text()
	if i := strings.LastIndex(text, "> hello"); i < 0 || !strings.Contains(text[i:], "Hello!") {
		t.Errorf("no transcript at the end:\n%s", text)
	}
}

func TestTUIRunEscCancelsRetryAndCtrlCQuits(t *testing.T) {
	_, keys, out, done := startRun(t, 20*time.Second,
		provider.Outcome{Message: provider.Failure(503, "503 Service Unavailable", nil)},
		provider.Outcome{Message: provider.Text("Hello!")},
	)
	if _, err := io.WriteString(keys, "hello\r"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "Retrying (1/10) in ")
	if _, err := io.WriteString(keys, "\x1b"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "Retry failed after 0 attempts: Retry cancelled")
	if _, err := io.WriteString(keys, "\x03"); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	waitRun(t, done)
}

func TestTUIRunEscAbortsRunningPrompt(t *testing.T) {
	_, keys, out, done := startRun(t, time.Second, provider.Outcome{Block: true})
	if _, err := io.WriteString(keys, "hello\r"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "Working… (esc to abort)")
	if _, err := io.WriteString(keys, "\x1b"); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "Aborted.")
	if _, err := io.WriteString(keys, "\x03"); err != nil {
		t.Fatal(err)
	}
	waitRun(t, done)
}
