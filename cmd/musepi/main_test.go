package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/internal/testkit/testbin"
	"github.com/musepi/musepi/internal/testkit/waiting"
)

// waitingTests is how many tests of this package run at once unless
// -parallel says otherwise: most of them wait on processes, leases and
// timers, not on the CPU.
const waitingTests = 6

func TestMain(m *testing.M) {
	if err := waiting.Parallel(waitingTests); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The programs build while the tests that need no process run, and
	// pi's client while the other tests run.
	building, stopBuilding := context.WithCancel(context.Background())
	pi := !testing.Short() && mayRun("TestPiRPCCompat")
	if !testing.Short() {
		go func() { _ = programs.Build(building) }()
	}
	if pi {
		go preparePi()
	}
	code := m.Run()
	stopBuilding()
	if pi {
		preparePi() // not left running for the leak check
	}
	if err := programs.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// mayRun reports whether -test.run and -test.skip may run the top-level
// test name, by their patterns' first elements: a guess, for work started
// ahead of a test (a wrong guess costs time, never a result).
func mayRun(name string) bool {
	matches := func(flagName string, empty bool) bool {
		pattern, _, _ := strings.Cut(flag.Lookup(flagName).Value.String(), "/")
		if pattern == "" {
			return empty
		}
		ok, err := regexp.MatchString(pattern, name)
		return ok || err != nil
	}
	return matches("test.run", true) && !matches("test.skip", false)
}

// runCaptured runs the command line args (without the program name) in
// this process and returns its exit status, stdout and stderr.
func runCaptured(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	oldOut, oldErr := stdout, stderr
	stdout, stderr = &out, &errOut
	defer func() { stdout, stderr = oldOut, oldErr }()
	code := run(args)
	return code, out.String(), errOut.String()
}

// programs are the binaries the tests run as processes: this command
// and the chaos test's client (internal/testkit/nodetest/swarm).
var programs = testbin.NewSet(musepiPkg, swarmPkg)

// The import paths of programs.
const (
	musepiPkg = "github.com/musepi/musepi/cmd/musepi"
	swarmPkg  = "github.com/musepi/musepi/internal/testkit/nodetest/swarm"
)

// buildCommand returns the musepi binary, built once.
func buildCommand(t *testing.T) string {
	t.Helper()
	return program(t, musepiPkg)
}

// program returns the binary of the program at import path pkg, one of
// programs.
func program(t *testing.T, pkg string) string {
	t.Helper()
	err := programs.Build(context.Background())
	if errors.Is(err, testbin.ErrNoGo) {
		t.Skip("no go tool to build the command")
	}
	if err != nil {
		t.Fatal(err)
	}
	return programs.Path(pkg)
}

// runToEnd runs the command and returns its exit code and stderr.
func runToEnd(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	code, _, errOut := runOutput(t, bin, args...)
	return code, errOut
}

// runOutput runs the command and returns its exit code, stdout and stderr.
func runOutput(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("run %v: %v", args, err)
	return -1, "", ""
}

// server is a running "musepi fakellm".
type server struct {
	cmd   *exec.Cmd
	base  string
	lines chan string // stderr lines; closed at EOF
}

func startCommand(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"fakellm", "--listen", "127.0.0.1:0"}, args...)...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			for range s.lines {
			}
			_ = cmd.Wait()
		}
	})
	select {
	case line, ok := <-s.lines:
		const prefix = "fakellm listening on "
		if !ok || !strings.HasPrefix(line, prefix) {
			t.Fatalf("first stderr line %q, want %q...", line, prefix)
		}
		s.base = strings.TrimPrefix(line, prefix)
		if !strings.HasPrefix(s.base, "http://127.0.0.1:") {
			t.Fatalf("base URL %q", s.base)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no listening line within 10 s")
	}
	return s
}

// stop signals the server and waits for it to exit; it returns the exit
// code and the rest of stderr.
func (s *server) stop(t *testing.T, sig os.Signal) (int, string, time.Duration) {
	t.Helper()
	began := time.Now()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	var rest []string
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case line, ok := <-s.lines:
			if !ok {
				done = true
			} else {
				rest = append(rest, line)
			}
		case <-timeout:
			t.Fatal("server did not exit within 10 s of the signal")
		}
	}
	err := s.cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, strings.Join(rest, "\n"), time.Since(began)
}

func post(t *testing.T, client *http.Client, url, model string, stream bool) (*http.Response, error) {
	t.Helper()
	body := `{"model":"` + model + `","max_tokens":64,"messages":[{"role":"user","content":"hi"}]`
	if stream {
		body += `,"stream":true`
	}
	body += `}`
	r, err := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("x-api-key", "key-a")
	r.Header.Set("anthropic-version", "2023-06-01")
	r.Header.Set("content-type", "application/json")
	return client.Do(r)
}

func TestCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := buildCommand(t)
	dir := t.TempDir()

	t.Run("bad scenario", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(bad, []byte(`{"rules": [{"match": {"model": "m1"}, "respond": {"status": 700}}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		code, errOut := runToEnd(t, bin, "fakellm", "--listen", "127.0.0.1:0", "--scenario", bad)
		if code != 1 || !strings.Contains(errOut, "rules[0].respond.status: must be 100-599, got 700") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
		unknown := filepath.Join(dir, "unknown.json")
		if err := os.WriteFile(unknown, []byte(`{"rules": [{"match": {"modle": "m1"}, "respond": {}}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		code, errOut = runToEnd(t, bin, "fakellm", "--scenario", unknown)
		if code != 1 || !strings.Contains(errOut, "rules[0].match.modle: unknown field") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("serves the scenario until SIGINT", func(t *testing.T) {
		s := startCommand(t, bin, "--scenario", "../../provider/fakellm/testdata/fallback.json")
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		resp, err := post(t, client, s.base, "m1", true)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 529 || !strings.Contains(string(body), "overloaded_error") {
			t.Errorf("m1: %d %s", resp.StatusCode, body)
		}
		resp, err = post(t, client, s.base, "m2", true)
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "event: message_stop") || !strings.Contains(string(body), `"text":"m m2"`) {
			t.Errorf("m2: %d %s", resp.StatusCode, body)
		}
		resp, err = client.Get(s.base + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"total": 2`) {
			t.Errorf("stats %s", body)
		}
		tr.CloseIdleConnections()
		code, rest, _ := s.stop(t, os.Interrupt)
		if code != 0 {
			t.Errorf("exit %d after SIGINT; stderr %q", code, rest)
		}
	})
	t.Run("default scenario and SIGTERM with a stream open", func(t *testing.T) {
		stall := filepath.Join(dir, "stall.json")
		if err := os.WriteFile(stall, []byte(`{"rules": [{"match": {"model": "stall"}, "respond": {"stall_ms": 60000}}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		s := startCommand(t, bin, "--scenario", stall)
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
		resp, err := post(t, client, s.base, "m", false)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "Hello from fakellm") {
			t.Errorf("default: %d %s", resp.StatusCode, body)
		}
		resp, err = post(t, client, s.base, "stall", true)
		if err != nil {
			t.Fatal(err)
		}
		readDone := make(chan error, 1)
		go func() {
			_, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			readDone <- err
		}()
		code, rest, took := s.stop(t, syscall.SIGTERM)
		if code != 0 || took > 5*time.Second {
			t.Errorf("exit %d after %v; stderr %q", code, took, rest)
		}
		select {
		case <-readDone:
		case <-time.After(5 * time.Second):
			t.Error("stalled stream still open after the server exited")
		}
	})
}
