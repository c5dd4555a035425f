package main

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/internal/testkit/nodetest"
)

// startFailureBound is how long a `musepi node` whose start cannot succeed
// may take to say so and exit.
const startFailureBound = 10 * time.Second

// TestNodeStartFailures: `musepi node` processes whose start cannot
// succeed exit within 10 s with status 1, their last line saying why, and
// no panic: a port already in use, a database that refuses connections (at
// one address, or at both of a URL's hosts: one line still), a database
// that never answers, an advertised address the node cannot connect to.
func TestNodeStartFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL and node processes")
	}
	t.Parallel() // mostly waiting on processes
	env := nodetest.Start(t, buildCommand(t), nodetest.Options{})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	closed, closed2 := nodetest.FreePort(t), nodetest.FreePort(t) // nobody listens there
	refusedDB := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/x?sslmode=disable", closed)
	silentDB := pgtest.Silent(t)
	for _, tc := range []struct {
		name   string
		config func(name string) string
		want   string // in the last line
	}{
		{"a port in use", func(name string) string { return env.Config(name, busyPort, nodetest.Member{}) },
			fmt.Sprintf("failed to listen: listen tcp 127.0.0.1:%d: bind: address already in use", busyPort)},
		{"a database that refuses connections", func(name string) string {
			return strings.Replace(env.Config(name, nodetest.FreePort(t), nodetest.Member{}), env.DB, refusedDB, 1)
		}, "musepi node: database: pgstore: migrate: failed to connect to `user=postgres database=x`: 127.0.0.1:" + fmt.Sprint(closed) + " (127.0.0.1): dial error: dial tcp 127.0.0.1:" + fmt.Sprint(closed) + ": connect: connection refused"},
		{"a database whose every address refuses", func(name string) string {
			return strings.Replace(env.Config(name, nodetest.FreePort(t), nodetest.Member{}), env.DB, strings.Replace(refusedDB, ":"+fmt.Sprint(closed), fmt.Sprintf(":%d,127.0.0.1:%d", closed, closed2), 1), 1)
		}, fmt.Sprintf("127.0.0.1:%d (127.0.0.1): dial error: dial tcp 127.0.0.1:%d: connect: connection refused; 127.0.0.1:%d (127.0.0.1): dial error: dial tcp 127.0.0.1:%d: connect: connection refused", closed, closed, closed2, closed2)},
		{"a database that never answers", func(name string) string {
			return strings.Replace(env.Config(name, nodetest.FreePort(t), nodetest.Member{}), env.DB, silentDB, 1)
		}, "failed to receive message: timeout: context deadline exceeded"},
		{"an advertised address it cannot connect to", func(name string) string {
			return strings.Replace(env.Config(name, nodetest.FreePort(t), nodetest.Member{}), `membership = "etcd"`,
				fmt.Sprintf("advertise_address = \"127.0.0.1:%d\"\nmembership = \"etcd\"", closed), 1)
		}, fmt.Sprintf("this node cannot connect to its own advertised address 127.0.0.1:%d", closed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			n := env.LaunchConfig(name, tc.config(name))
			code, took, err := n.Wait(startFailureBound)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(n.Output().String()), "\n")
			last := lines[len(lines)-1]
			if code != 1 || !strings.Contains(last, tc.want) || !strings.HasPrefix(last, "musepi node: ") {
				t.Errorf("exit %d after %s, last line %q; want exit 1 and %q", code, took.Round(time.Millisecond), last, tc.want)
			}
			if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "panic") || strings.HasPrefix(l, "goroutine ") }); i >= 0 {
				t.Errorf("output line %q: a panic", lines[i])
			}
			t.Logf("exit %d after %s: %s", code, took.Round(time.Millisecond), last)
		})
	}
}

// TestNodeSignalDuringStart: SIGTERM while `musepi node` starts ends it
// promptly with status 1, saying the start did not complete: during the
// database's connect (a database that never answers, which would take
// 5 s to time out), and during protoactor's member start, which takes no
// context (the member joins, then leaves; its database row goes).
func TestNodeSignalDuringStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL and node processes")
	}
	t.Parallel() // mostly waiting on processes
	env := nodetest.Start(t, buildCommand(t), nodetest.Options{})
	silentDB := pgtest.Silent(t)
	for _, tc := range []struct {
		name   string
		node   string
		db     string
		after  time.Duration // from the "joining" line to SIGTERM
		within time.Duration
		member bool // the start reached the member: its database row must go
	}{
		{"during the database's connect", "connecting", silentDB, 500 * time.Millisecond, time.Second, false},
		{"during the member's start", "joining", env.DB, 300 * time.Millisecond, startUnwind + time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.node
			n := env.LaunchConfig(name, strings.Replace(env.Config(name, nodetest.FreePort(t), nodetest.Member{}), env.DB, tc.db, 1))
			if _, err := n.WaitLine("joining cluster", nodetest.StartTimeout); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tc.after)
			took, err := n.Term(tc.within)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("SIGTERM %s after the start began: %v after %s; want exit 1 within %s", tc.after, err, took, tc.within)
			}
			if _, err := n.WaitLine("musepi node: interrupted before the start completed", 0); err != nil {
				t.Error(err)
			}
			if tc.member && slices.ContainsFunc(nodeRows(t, env.DB), func(r string) bool { return strings.HasPrefix(r, name+"#") }) {
				t.Errorf("the node's database row is left after the interrupted start")
			}
			t.Logf("SIGTERM %s after the start began: exit 1 after %s", tc.after, took.Round(time.Millisecond))
		})
	}
}
