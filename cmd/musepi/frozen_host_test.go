package main

import (
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/nodetest"
)

// TestClientOfFrozenHost: the node hosting a client's session is frozen
// (SIGSTOP; here both nodes are) when the client's input ends. The client exits within its
// close timeout (rpc.CloseTimeout) and the 10 s shutdown, with one clear
// error and status 1, not after tens of seconds with a line per actor.
func TestClientOfFrozenHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL and two node processes")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	env := nodetest.Start(t, bin, nodetest.Options{})
	nodes := map[string]*nodetest.Node{"node1": env.StartNode("node1"), "node2": env.StartNode("node2")}
	if err := env.WaitMembers(2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	c := env.StartClient(nodes["node1"], "--session-id", "frozen")
	promptOK(t, c, "1", "hello")
	// The client's own join can move the session: let that settle, and
	// have the handle reach the activation where it is now.
	time.Sleep(time.Second)
	c.Call("s", `{"id":"s","type":"get_state"}`, 20*time.Second)
	// Both nodes freeze, so the session's host does wherever it is.
	for _, n := range nodes {
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = n.Resume() }()
	}
	start := time.Now()
	err := c.Close(30 * time.Second)
	took := time.Since(start)
	t.Logf("the client of a frozen host exited %s after its input ended: %v", took.Round(time.Millisecond), err)
	stderr := c.Stderr()
	if err == nil || took > 16*time.Second {
		t.Fatalf("exit %v after %s; want a failure within 16 s. stderr:\n%s", err, took.Round(time.Millisecond), stderr)
	}
	if lines := nodetest.Logged(strings.Split(stderr, "\n"), "musepi rpc: "); len(lines) != 1 || !strings.Contains(lines[0], "close session frozen") {
		t.Errorf("stderr:\n%s\nwant one line saying the session could not be closed", stderr)
	}
	if strings.Contains(stderr, "musepi: stop") {
		t.Errorf("stderr names the runtime's actors:\n%s", stderr)
	}
}
