package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/testtool"
)

// inOrder fails unless text holds every line of want, in that order.
func inOrder(t *testing.T, text string, want ...string) {
	t.Helper()
	rest := text
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("output lacks %q (after the lines before it):\n%s", w, text)
		}
		rest = rest[i+len(w):]
	}
}

// Each scenario, on the fast clock, shows what it promises in -h.
func TestDemoFastScenarios(t *testing.T) {
	cases := []struct {
		scenario string
		want     []string
	}{
		{"tour", []string{
			"▶ tour:",
			"→ calling tour/m1", "insufficient_quota", "⇄ key over its usage limit: retry 1/10 at once, with the next API key",
			"→ calling tour/m1", "503", "⇄ model fallback tour/m1 → tour/m2", "retry 2/10 at once, on the fallback model",
			"→ calling tour/m2", "429", "⏳ retry 3/10 in ", "(the provider's retry-after: 0.003 honoured)",
			"→ calling tour/m2", "503", "retry 4/10",
			"→ calling tour/m2", "✓ recovered after 4 retries",
			"answer (tour/m2): Answered by the fallback model m2",
			"⏱ ", "5 calls, 4 retries", "1 credential switch, 1 model fallback",
		}},
		{"outage", []string{
			"▶ outage:", "503", "retry 1/10", "503", "retry 2/10", "503", "retry 3/10", "503", "retry 4/10",
			"✓ recovered after 4 retries", "answer (outage/m1): Back after the outage", "5 calls, 4 retries",
		}},
		{"give-up", []string{
			"▶ give-up:", "→ calling give-up/m1", "429",
			"✗ Retry failed after 0 attempts: provider asked for 600 ms, more than retry.maxDelayMs",
			"1 call, 0 retries", "(as this scenario intends: the policy gave up rather than sleep)",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.scenario, func(t *testing.T) {
			code, out, errOut := runCaptured(t, "demo", "--fast", "--scenario", tc.scenario)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			inOrder(t, out, tc.want...)
			if strings.Contains(out, "\r") || strings.Contains(out, "\x1b[") {
				t.Errorf("redrawing on a non-terminal:\n%q", out)
			}
		})
	}
	t.Run("all runs every scenario in order", func(t *testing.T) {
		code, out, errOut := runCaptured(t, "demo", "--fast", "--scenario", "all")
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		inOrder(t, out, "▶ tour:", "answer (tour/m2)", "▶ outage:", "answer (outage/m1)", "▶ give-up:", "Retry failed")
	})
}

// "musepi demo -h" lists every scenario with what it shows, and examples.
func TestDemoHelp(t *testing.T) {
	code, help, _ := runCaptured(t, "demo", "-h")
	if code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	for _, sc := range demoScenarios {
		inOrder(t, help, "\n  "+sc.name, strings.SplitN(sc.about, "\n", 2)[0])
	}
	inOrder(t, help, "usage: musepi demo", "retry", "Ctrl-C", "tour (default)", "musepi demo --scenario outage", "--fast", "-scenario")
}

// countdownRE is the live countdown of the tour's 3 s backoff.
var countdownRE = regexp.MustCompile(`⏳ retry 3/10 in (\d+\.\d)s`)

// The default demo in a terminal: the countdown of the retry-after
// backoff is redrawn in place and goes down, and the whole demo takes
// less than 30 s.
func TestDemoTmuxCountdown(t *testing.T) {
	if testing.Short() {
		t.Skip("drives the command in tmux")
	}
	testtool.Need(t, testtool.Tmux, "tmux")
	t.Parallel() // mostly waiting on the pane
	bin := buildCommand(t)
	began := time.Now()
	p := startPane(t, "demo", nil, shellQuote(bin)+" demo")
	var seen []float64
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < 2 || seen[len(seen)-1] >= seen[0] {
		if time.Now().After(deadline) {
			p.fatalf("no decreasing countdown within 20 s; values seen: %v", seen)
		}
		if m := countdownRE.FindStringSubmatch(p.capture()); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			if len(seen) == 0 || v != seen[len(seen)-1] {
				seen = append(seen, v)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("countdown values seen: %v", seen)
	if seen[0] > 3.0 {
		t.Errorf("the countdown started at %.1f s, above the 3 s the provider asked for", seen[0])
	}
	if code := p.waitExit(30 * time.Second); code != 0 {
		p.fatalf("exit status %d", code)
	}
	took := time.Since(began)
	screen := p.captureAll()
	t.Logf("the demo took %v:\n%s", took, screen)
	if took > 30*time.Second {
		t.Errorf("the demo took %v, want under 30 s", took)
	}
	inOrder(t, screen, "⇄ key over its usage limit", "⇄ model fallback tour/m1 → tour/m2",
		"⏳ retry 3/10 after 3.0s (the provider's retry-after: 3 honoured)", "⏳ retry 4/10 after ",
		"✓ recovered after 4 retries", "answer (tour/m2)", "⏱ ")
	if strings.Count(screen, "retry 3/10") != 1 {
		t.Errorf("the countdown was not redrawn in place (one line):\n%s", screen)
	}
}

// Ctrl-C (SIGINT) during the backoff ends the demo within 1 s, with a
// summary that counts the retries made (retry 3/10, pending, is not): no
// next scenario, no raw "context canceled".
func TestDemoInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the command as a process")
	}
	bin := buildCommand(t)
	cmd := exec.Command(bin, "demo", "--scenario", "all")
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var out []string
	timeout := time.After(20 * time.Second)
	for waiting := true; waiting; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended before its backoff:\n%s", strings.Join(out, "\n"))
			}
			out = append(out, line)
			waiting = !strings.Contains(line, "⏳ retry 3/10 in ")
		case <-timeout:
			t.Fatalf("no backoff within 20 s:\n%s", strings.Join(out, "\n"))
		}
	}
	time.Sleep(300 * time.Millisecond) // well inside the 3 s backoff
	sent := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for line := range lines {
		out = append(out, line)
	}
	err = cmd.Wait()
	took := time.Since(sent)
	text := strings.Join(out, "\n")
	t.Logf("exited %v after SIGINT:\n%s", took, text)
	if took > time.Second {
		t.Errorf("exited %v after SIGINT, want within 1 s", took)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit %v, want status 130", err)
	}
	inOrder(t, text, "⏳ retry 3/10 in ", "⏳ retry 3/10 cancelled after ",
		"■ Interrupted in the backoff before retry 3/10; the prompt was aborted and nothing more is sent: ",
		"3 calls, 2 retries", "1 credential switch, 1 model fallback")
	for _, bad := range []string{"context canceled", "▶ outage", "→ calling tour/m2\n  →"} {
		if strings.Contains(text+"\n"+errOut.String(), bad) {
			t.Errorf("output has %q:\n%s\nstderr:\n%s", bad, text, errOut.String())
		}
	}
	if strings.Count(text, "→ calling") != 3 {
		t.Errorf("a call after the interrupt:\n%s", text)
	}
}
