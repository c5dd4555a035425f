package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/testtool"
	"github.com/musepi/musepi/provider/fakellm"
)

// tmuxSeq makes tmux server and session names unique within the test run.
var tmuxSeq atomic.Int64

// tmuxPane is "musepi chat" running in a detached tmux session of its own
// tmux server, driven as a person would: keys in, screen out.
type tmuxPane struct {
	t      *testing.T
	sock   string // tmux -S socket path: a server only this test uses
	target string // session name
	log    string // the chat's stderr (-v diagnostics)
}

func (p *tmuxPane) tmux(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "tmux", append([]string{"-S", p.sock}, args...)...)
	cmd.Env = tmuxEnv()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (p *tmuxPane) must(args ...string) string {
	p.t.Helper()
	out, err := p.tmux(args...)
	if err != nil {
		p.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// keys types into the pane (tmux key names: Enter, Escape, C-c; other words literally).
func (p *tmuxPane) keys(keys ...string) {
	p.t.Helper()
	p.must(append([]string{"send-keys", "-t", p.target}, keys...)...)
}

func (p *tmuxPane) capture() string {
	p.t.Helper()
	return p.must("capture-pane", "-p", "-t", p.target)
}

// captureAll is the screen with the scrollback above it.
func (p *tmuxPane) captureAll() string {
	p.t.Helper()
	return p.must("capture-pane", "-p", "-S", "-", "-t", p.target)
}

// fatalf fails the test with the screen and the chat's log.
func (p *tmuxPane) fatalf(format string, args ...any) {
	p.t.Helper()
	logText, _ := os.ReadFile(p.log)
	p.t.Fatalf(format+"\nscreen:\n%s\nchat log:\n%s", append(args, p.capture(), logText)...)
}

// waitFor polls the screen until it shows want, and returns that screen.
func (p *tmuxPane) waitFor(want string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		screen := p.capture()
		if strings.Contains(screen, want) {
			return screen
		}
		if time.Now().After(deadline) {
			p.fatalf("after %v the screen does not show %q", timeout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exitRE is the line the pane's shell prints when its command has exited.
var exitRE = regexp.MustCompile(`\[musepi \w+ exited: (\d+)\]`)

// waitExit waits until the pane's command has exited and returns its exit
// status, as the shell that ran it (and reaped it) reports.
func (p *tmuxPane) waitExit(timeout time.Duration) int {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := exitRE.FindStringSubmatch(p.captureAll()); m != nil {
			code, _ := strconv.Atoi(m[1])
			return code
		}
		if time.Now().After(deadline) {
			if pid := p.chatPID(); pid > 0 {
				// Have the Go runtime dump the goroutines into the log.
				_ = syscall.Kill(pid, syscall.SIGQUIT)
				time.Sleep(time.Second)
			}
			p.fatalf("the chat process did not exit within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chatPID is the pane's command (the chat, the demo): the child of the
// pane's shell; 0 if none.
func (p *tmuxPane) chatPID() int {
	p.t.Helper()
	shell := strings.TrimSpace(p.must("display-message", "-p", "-t", p.target, "#{pane_pid}"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "ps", "-o", "pid=", "--ppid", shell).Output()
	pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return pid
}

func tmuxEnv() []string {
	env := make([]string, 0, len(os.Environ())+1)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TMUX=") && !strings.HasPrefix(kv, "TMUX_PANE=") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_CTYPE=C.UTF-8")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// startChat serves scenario on a fakellm server and starts "musepi chat"
// against it in a 120x30 tmux pane; it returns once the UI is drawn.
func startChat(t *testing.T, bin, scenario string) *tmuxPane {
	t.Helper()
	sc, err := fakellm.ParseScenario([]byte(scenario))
	if err != nil {
		t.Fatal(err)
	}
	srv := fakellm.New(sc)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() }) // runs after the tmux cleanup of startPane
	p := startPane(t, "chat", []string{"OPENAI_API_KEY=key-a"},
		shellQuote(bin)+" chat --provider openai --base-url "+shellQuote(base+"/v1")+" --model m1 -v")
	p.waitFor("ctrl+c quit", 15*time.Second)
	return p
}

// startPane runs command (a shell command line; its stderr goes to the
// pane's log) in a detached 120x30 tmux pane of its own tmux server, with
// env added to the environment. name labels the pane.
func startPane(t *testing.T, name string, env []string, command string) *tmuxPane {
	t.Helper()
	// A short directory of its own: socket paths are limited to ~100 bytes.
	sockDir, err := os.MkdirTemp("", "mp"+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	n := tmuxSeq.Add(1)
	p := &tmuxPane{
		t:      t,
		sock:   filepath.Join(sockDir, "tmux"),
		target: fmt.Sprintf("musepi-%s-%d-%d", name, os.Getpid(), n),
	}
	dir := t.TempDir()
	p.log = filepath.Join(dir, name+".log")
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g remain-on-exit on\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The shell waits for the command and reports its exit status on the
	// screen (tmux itself does not always notice a pane process exit).
	command += " 2>" + shellQuote(p.log) + `; echo "[musepi ` + name + ` exited: $?]"`
	args := []string{"-f", conf, "-u", "new-session", "-d", "-x", "120", "-y", "30", "-s", p.target}
	for _, kv := range env {
		args = append(args, "-e", kv)
	}
	p.must(append(args, command)...)
	t.Cleanup(func() {
		_, _ = p.tmux("kill-session", "-t", p.target)
		_, _ = p.tmux("kill-server")
	})
	return p
}

const (
	// A 429 asking for 3 s, then answers.
	scenarioRetryAfter3 = `{"rules": [{"match": {"first": 1}, "respond": {"preset": "rate_limit", "headers": {"retry-after": "3"}}}],
		"default": {"text": "Hello from fakellm"}}`
	// Every call is a 429 asking for 10 minutes: more than retry.maxDelayMs
	// (5 min), so the chain fails fast.
	scenarioRetryAfter600 = `{"rules": [{"respond": {"preset": "rate_limit", "headers": {"retry-after": "600"}}}]}`
)

// Without a terminal on stdin and stdout, "musepi chat" says so in one
// line on stderr and exits with status 2 within a second, before anything
// starts: no hang on a pipe (echo hello | musepi chat, or one left open),
// no error from the UI and no escape codes on stdout (musepi chat
// </dev/null). TestChatTmux has a terminal on one of the two.
func TestChatNeedsTerminal(t *testing.T) {
	t.Parallel()
	bin := buildCommand(t)
	const want = "musepi chat: stdin and stdout are not terminals: the chat needs one to read keys and draw on (for a session over pipes, use musepi rpc)\n"
	for _, tc := range []struct {
		name  string
		stdin func(t *testing.T) io.Reader
	}{
		{"stdin from a pipe that ends", func(*testing.T) io.Reader { return strings.NewReader("hello\n") }},
		{"stdin from a pipe left open", func(t *testing.T) io.Reader {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = r.Close(), w.Close() })
			return r
		}},
		{"stdin from /dev/null", func(t *testing.T) io.Reader {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			return f
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "chat")
			var out, errOut strings.Builder
			cmd.Stdin, cmd.Stdout, cmd.Stderr = tc.stdin(t), &out, &errOut
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			if code := cmd.ProcessState.ExitCode(); code != 2 || took > time.Second {
				t.Errorf("exit status %d after %v (%v), want 2 within 1s", code, took, err)
			}
			if errOut.String() != want || out.Len() != 0 {
				t.Errorf("stderr %q, stdout %q; want stderr %q and nothing on stdout", errOut.String(), out.String(), want)
			}
		})
	}
}

func TestChatTmux(t *testing.T) {
	if testing.Short() {
		t.Skip("drives the command in tmux")
	}
	t.Parallel() // mostly waiting on processes
	testtool.Need(t, testtool.Tmux, "tmux")
	bin := buildCommand(t)

	t.Run("countdown, Esc cancels the retry, then Ctrl-C quits", func(t *testing.T) {
		p := startChat(t, bin, scenarioRetryAfter3)
		if screen := p.capture(); !strings.Contains(screen, "MusePi chat · openai/m1") {
			t.Errorf("header missing:\n%s", screen)
		}
		p.keys("hello", "Enter")
		screen := p.waitFor("Retrying (1/10) in 3s… (esc to cancel)", 15*time.Second)
		t.Logf("screen at the retry:\n%s", screen)
		if strings.Contains(screen, "Working…") {
			t.Errorf("the spinner line is still shown during the backoff:\n%s", screen)
		}
		p.waitFor("Retrying (1/10) in 2s… (esc to cancel)", 3*time.Second)
		p.keys("Escape")
		screen = p.waitFor("Retry failed after 0 attempts: Retry cancelled", 5*time.Second)
		t.Logf("screen after Esc:\n%s", screen)
		if strings.Contains(screen, "Retrying (") {
			t.Errorf("the retry line was not cleared:\n%s", screen)
		}
		if strings.Contains(screen, "Hello from fakellm") {
			t.Errorf("the cancelled retry still ran:\n%s", screen)
		}
		// The session goes on: the next prompt is answered.
		p.keys("again", "Enter")
		p.waitFor("Hello from fakellm", 10*time.Second)
		p.keys("C-c")
		if code := p.waitExit(10 * time.Second); code != 0 {
			t.Errorf("exit status %d after Ctrl-C", code)
		}
		// Back on the normal screen, the transcript is printed (with the
		// scrollback, in case tmux's "Pane is dead" line scrolled it).
		screen = p.captureAll()
		for _, want := range []string{"> hello", "Retry failed after 0 attempts: Retry cancelled", "> again", "Hello from fakellm"} {
			if !strings.Contains(screen, want) {
				t.Errorf("the screen after exit lacks %q:\n%s", want, screen)
			}
		}
	})

	t.Run("a retry that fails fast shows the failure line", func(t *testing.T) {
		p := startChat(t, bin, scenarioRetryAfter600)
		p.keys("hello", "Enter")
		screen := p.waitFor("Retry failed after 0 attempts: provider asked for 600000 ms", 15*time.Second)
		t.Logf("screen after the failure:\n%s", screen)
		if strings.Contains(screen, "Retrying (") || strings.Contains(screen, "Error:") {
			t.Errorf("want only the failure line:\n%s", screen)
		}
		p.keys("C-c")
		if code := p.waitExit(10 * time.Second); code != 0 {
			t.Errorf("exit status %d after Ctrl-C", code)
		}
	})

	// A terminal on one side only is not enough either.
	for _, tc := range []struct {
		name     string
		redirect func(out string) string // the shell's redirection, given a file
		want     string
	}{
		{"stdout to a file", func(out string) string { return ">" + shellQuote(out) }, "stdout is not a terminal"},
		{"stdin from /dev/null", func(string) string { return "</dev/null" }, "stdin is not a terminal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "stdout")
			p := startPane(t, "chat", nil, shellQuote(bin)+" chat "+tc.redirect(out))
			if code := p.waitExit(5 * time.Second); code != 2 {
				p.fatalf("exit status %d, want 2", code)
			}
			logText, _ := os.ReadFile(p.log)
			if !strings.HasPrefix(string(logText), "musepi chat: "+tc.want+": ") || strings.Count(string(logText), "\n") != 1 {
				t.Errorf("stderr %q, want one line saying %q", logText, tc.want)
			}
			if written, _ := os.ReadFile(out); len(written) != 0 {
				t.Errorf("stdout got %q", written)
			}
		})
	}

	t.Run("SIGTERM during the backoff quits cleanly", func(t *testing.T) {
		p := startChat(t, bin, scenarioRetryAfter3)
		p.keys("hello", "Enter")
		p.waitFor("Retrying (1/10) in ", 15*time.Second)
		pid := p.chatPID()
		if pid <= 0 {
			t.Fatal("no chat process in the pane")
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.waitExit(10 * time.Second); code != 0 {
			t.Errorf("exit status %d after SIGTERM", code)
		}
	})
}
