package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/internal/testkit/soak"
)

// TestClusterRidesOutEtcdOutage: etcd stopped for 30 s with -tags soak (8
// s without), then started again on the same data, under three nodes and a
// client. Meanwhile the
// running session keeps answering, a new client fails within 10 s saying
// why, and each node says once that etcd is out of reach and once that it
// is back; then every member list and etcd's registrations agree within
// 10 s.
func TestClusterRidesOutEtcdOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL and three node processes")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	env := nodetest.Start(t, bin, nodetest.Options{})
	nodes := []*nodetest.Node{env.StartNode("node1"), env.StartNode("node2"), env.StartNode("node3")}
	if err := env.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	c := env.StartClient(nodes[0], "--session-id", "steady")
	promptOK(t, c, "1", "before the outage")

	env.Etcd.Halt()
	halted := time.Now()
	promptOK(t, c, "2", "while etcd is away")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "rpc", "--cluster", "--config", nodes[0].Config, "--session-id", "newcomer")
	cmd.Env = nodetest.Environ()
	cmd.Stdin = strings.NewReader(`{"id":"1","type":"prompt","message":"hello"}` + "\n")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err == nil || took > 10*time.Second || !strings.Contains(string(out), "etcd") {
		t.Errorf("a new client while etcd is away: %v after %s, output:\n%s\nwant a failure within 10 s that names etcd", err, took.Round(time.Millisecond), out)
	}
	t.Logf("a new client while etcd is away failed after %s: %s", took.Round(time.Millisecond), lastLine(out))

	outage := 8 * time.Second
	if soak.Enabled {
		outage = 30 * time.Second
	}
	time.Sleep(time.Until(halted.Add(outage)))
	if err := env.Etcd.Restart(); err != nil {
		t.Fatal(err)
	}
	agreed, err := env.WaitAgreement(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd back after %s; member lists and etcd agree %s later", time.Since(halted).Round(time.Second), agreed.Round(time.Millisecond))
	promptOK(t, c, "3", "after the outage")
	// The return is logged at the next lease renewal after etcd is back.
	time.Sleep(2 * time.Second)
	for _, n := range nodes {
		out := n.Output().String()
		if lost, back := strings.Count(out, "etcd is out of reach"), strings.Count(out, "etcd is reachable again"); lost != 1 || back != 1 {
			t.Errorf("%s logged etcd's loss %d times and its return %d times, want once each", n.Name, lost, back)
		}
	}
}
