//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/musepi/musepi/history"
	"github.com/musepi/musepi/messages"
)

// readHistory opens a session's history file as a new session would.
func readHistory(t *testing.T, dir, id string) []*messages.Entry {
	t.Helper()
	s, err := history.OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, entries, err := s.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return entries
}

// setFileSizeLimit sets the RLIMIT_FSIZE of process pid: writes past
// limit bytes fail with EFBIG, as a full disk fails them with ENOSPC.
func setFileSizeLimit(t *testing.T, pid int, limit uint64) {
	t.Helper()
	if err := unix.Prlimit(pid, unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: unix.RLIM_INFINITY}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
}

func fileSize(t *testing.T, path string) uint64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(info.Size())
}

// Item 2, end to end: a real write error (the file-size limit of the
// process, which the kernel enforces like a full disk) fails the prompt
// with an error response or an agent_settled error naming the file; once
// writes succeed again the session goes on, seq without gap or duplicate.
func TestRPCHistoryWriteFails(t *testing.T) {
	bin := buildCommand(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.jsonl")
	p := startRPC(t, bin, `{"default":{"text":"answer"}}`, "--history-dir", dir, "--session-id", "s")
	pid := p.cmd.Process.Pid
	prompt := func(id, text string) map[string]any {
		p.send(`{"id":"` + id + `","type":"prompt","message":"` + text + `"}`)
		return p.response(id)
	}
	// settled returns the n-th agent_settled: a refused prompt's may come
	// before its response.
	settled := func(n int) map[string]any {
		t.Helper()
		for {
			var all []map[string]any
			for _, obj := range p.seen {
				if obj["type"] == "agent_settled" {
					all = append(all, obj)
				}
			}
			if len(all) >= n {
				return all[n-1]
			}
			p.next("agent_settled", 10*time.Second)
		}
	}
	if r := prompt("1", "one"); r["success"] != true {
		t.Fatalf("prompt 1: %v", r)
	}
	if s := settled(1); s["success"] != true {
		t.Fatalf("prompt 1 settled: %v", s)
	}

	// No room for the user entry: the prompt is refused, naming the file.
	setFileSizeLimit(t, pid, fileSize(t, path)+10)
	r := prompt("2", "two")
	if r["success"] != false || !strings.Contains(fmt.Sprint(r["error"]), path) || !strings.Contains(fmt.Sprint(r["error"]), "file too large") {
		t.Fatalf("prompt 2 response: %v", r)
	}
	if s := settled(2); s["success"] != false || !strings.Contains(fmt.Sprint(s["error"]), path) {
		t.Fatalf("prompt 2 settled: %v", s)
	}

	// Room for the user entry, not for the answer: recorded, then failed.
	setFileSizeLimit(t, pid, fileSize(t, path)+uint64(len(`{"seq":"3","user":{"text":"three","timestampMs":"1796000000000"}}`))+20)
	if r := prompt("3", "three"); r["success"] != true {
		t.Fatalf("prompt 3 response: %v", r)
	}
	if s := settled(3); s["success"] != false || !strings.Contains(fmt.Sprint(s["error"]), path) ||
		!strings.Contains(fmt.Sprint(s["error"]), "file too large") {
		t.Fatalf("prompt 3 settled: %v", s)
	}

	// Room again.
	setFileSizeLimit(t, pid, unix.RLIM_INFINITY)
	if r := prompt("4", "four"); r["success"] != true {
		t.Fatalf("prompt 4: %v", r)
	}
	if s := settled(4); s["success"] != true {
		t.Fatalf("prompt 4 settled: %v", s)
	}
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	entries := readHistory(t, dir, "s")
	var got []string
	for i, e := range entries {
		if e.GetSeq() != uint64(i+1) {
			t.Fatalf("seq %d at %d", e.GetSeq(), i)
		}
		switch {
		case e.GetUser() != nil:
			got = append(got, "user:"+e.GetUser().GetText())
		case e.GetAssistant() != nil:
			got = append(got, "assistant")
		}
	}
	if want := "user:one assistant user:three user:four assistant"; strings.Join(got, " ") != want {
		t.Fatalf("history %q, want %q", got, want)
	}
}

// Item 3, across processes: a second "musepi rpc" on the same session
// exits with the first one's pid in its error.
func TestRPCSecondProcessRefused(t *testing.T) {
	bin := buildCommand(t)
	dir := t.TempDir()
	first := startRPC(t, bin, `{"default":{"text":"answer"}}`, "--history-dir", dir, "--session-id", "s")
	first.send(`{"id":"1","type":"get_state"}`)
	first.response("1") // the session is open
	code, stderr := runToEnd(t, bin, "rpc", "--history-dir", dir, "--session-id", "s")
	want := fmt.Sprintf("session is open in another process (pid %d)", first.cmd.Process.Pid)
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, filepath.Join(dir, "s.jsonl")) {
		t.Fatalf("second rpc: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
}

// Items 1 and 4: a history the process cannot read, or a directory it
// cannot write, fails the session's start with an error naming the file;
// nothing is written. Root can read and write anything, so as root the
// command runs as nobody.
func TestRPCHistoryPermissions(t *testing.T) {
	bin := buildCommand(t)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		openUp(t, filepath.Dir(bin)) // nobody must reach the binary
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"read-only directory", func(t *testing.T, dir string) {
			chown(t, dir, cred)
			if err := os.Chmod(dir, 0o555); err != nil {
				t.Fatal(err)
			}
		}, "permission denied"},
		{"unreadable file", func(t *testing.T, dir string) {
			chown(t, dir, cred)
			if err := os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte(`{"seq":"1","user":{"text":"hi"}}`+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, "s.jsonl"), 0o000); err != nil {
				t.Fatal(err)
			}
			chown(t, filepath.Join(dir, "s.jsonl"), cred)
		}, "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			openUp(t, parent)
			dir := filepath.Join(parent, "hist")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir)
			before := listDir(t, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "rpc", "--history-dir", dir, "--session-id", "s")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), filepath.Join(dir, "s.jsonl")) ||
				!strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("rpc on %s: %v, stderr %q", tt.name, err, stderr.String())
			}
			if after := listDir(t, dir); after != before {
				t.Fatalf("the directory changed: %s -> %s", before, after)
			}
		})
	}
}

// openUp makes dir and its parents up to the temporary directory
// traversable by every user.
func openUp(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// chown gives path to cred's user (as root), so that only the mode bars it.
func chown(t *testing.T, path string, cred *syscall.Credential) {
	t.Helper()
	if cred == nil {
		return
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
}

// listDir describes a directory's files with their sizes.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(path + ":" + strconv.FormatInt(info.Size(), 10) + " ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
