package cluster_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"go.uber.org/goleak"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/messages/protocol"
)

// leaveCases are TestLeaveClosesConnections' scenarios.
var leaveCases = []struct {
	name   string
	client bool // the node that leaves is a client (Config.Client)
	gone   bool // it sent a message to an address where nothing listens
}{
	{"a member leaves", false, false},
	{"a client leaves", true, false},
	{"a client that sent to an address gone leaves", true, true},
}

// TestLeaveClosesConnections: a node leaves a cluster whose other member
// lives on; once it has left, no gRPC connection of its own is left open
// or redialling, nor the other member's to it, and the other member has
// dropped it from its list. The node is a member (protoactor's graceful
// leave) or a client (MusePi's own path, which skips the 2 s wait); it
// may have sent to an address where nothing listens (as a reply to a
// member that has just left does), which protoactor's endpoint writer
// dials once per try. The nodes run in a child process, as
// TestSharedActors' do.
func TestLeaveClosesConnections(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "":
		t.Parallel() // with the other children: each mostly waits
		runChild(t, "^TestLeaveClosesConnections$", "leave", len(leaveCases))
		return
	case "leave":
	default:
		t.Skip("another child")
	}
	agent := test.NewInMemAgent()
	name := clusterName(t)
	stays, err := cluster.Start(settings(name, cluster.InProcess(agent)))
	if err != nil {
		t.Fatal(failed, err)
	}
	t.Cleanup(func() { _ = stays.Leave() })
	for _, tc := range leaveCases {
		t.Run(tc.name, func(t *testing.T) {
			leaveClosesConnections(t, stays, agent, name, tc.client, tc.gone)
			t.Log(scenarioDone)
		})
	}
}

// leaveClosesConnections starts a node (a client if client) in stays'
// cluster, and checks what its leave leaves behind.
func leaveClosesConnections(t *testing.T, stays *cluster.Member, agent *test.InMemAgent, name string, client, gone bool) {
	before := goleak.IgnoreCurrent() // stays' own goroutines
	cfg := settings(name, cluster.InProcess(agent))
	cfg.Client = client
	leaves, err := cluster.Start(cfg)
	if err != nil {
		t.Fatal(failed, err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(stays.Members()) == 2 && len(leaves.Members()) == 2 })
	// Connections both ways: a request to the activation, on whichever
	// node hosts it, and gossip.
	c := newCaller(t, leaves)
	if got := c.ask(t, leaves.Credentials("p"), &protocol.SelectCredential{SessionId: "s"}); got == nil {
		t.Fatal(failed + "no credential selected")
	}
	if gone {
		leaves.System().Root.Send(actor.NewPID(fmt.Sprintf("127.0.0.1:%d", freePort(t)), "gone"), &protocol.SelectCredential{})
	}
	start := time.Now()
	if err := leaves.Leave(); err != nil {
		t.Fatal(failed, err)
	}
	took := time.Since(start)
	t.Logf("left in %v", took)
	// A writer that cannot connect gives up after its one try and
	// protoactor's 2 s pause (10 s with its 5 tries).
	if took > 5*time.Second {
		t.Errorf(failed+"leaving took %v; want under 5 s", took)
	}
	waitFor(t, 5*time.Second, func() bool { return len(stays.Members()) == 1 })
	if err := goleak.Find(append(leakyDependencies, before)...); err != nil {
		t.Error(failed, err)
	}
}
