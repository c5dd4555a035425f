package cluster_test

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/etcdtest"
	"github.com/musepi/musepi/internal/testkit/protorace"
	"github.com/musepi/musepi/internal/testkit/waiting"
	"github.com/musepi/musepi/retry"
)

// waitingTests is how many tests run at once unless -parallel says
// otherwise: the child processes (runChild) and the tests with servers of
// their own mostly wait.
const waitingTests = 3

func TestMain(m *testing.M) {
	if err := waiting.Parallel(waitingTests); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts := leakyDependencies
	for _, mb := range memberships {
		if os.Getenv(childEnv) == mb.name { // a child: its membership's own leaks too
			opts = append(slices.Clone(opts), mb.leaks...)
		}
	}
	goleak.VerifyTestMain(m, opts...)
}

// leakyDependencies are goroutines that protoactor-go starts and never
// stops, whatever the member does (protorace.Leaks).
var leakyDependencies = protorace.Leaks

// settings are what every node of the test clusters shares: provider "p"
// with keys A and B and a retry budget, and a fallback chain.
func settings(name string, membership cluster.Membership) cluster.Config {
	budget := retry.DefaultBudgetSettings()
	budget.Enabled = true
	return cluster.Config{
		Name:       name,
		Membership: membership,
		Providers: []cluster.Provider{{Name: "p", Budget: budget,
			Credentials: []actors.Credential{{Name: "A", APIKey: "key-a"}, {Name: "B", APIKey: "key-b"}}}},
		FallbackChains: map[string][]string{"default": {"p/m1", "p/m2", "p/m3"}},
		RequestTimeout: time.Second,
	}
}

// memberships are the ways the test clusters find their members.
var memberships = []struct {
	name  string
	nodes func(t *testing.T, n int) []cluster.Membership
	leaks []goleak.Option // what the provider leaves running after Leave
}{
	{"in-process", func(t *testing.T, n int) []cluster.Membership {
		agent := test.NewInMemAgent()
		out := make([]cluster.Membership, n)
		for i := range out {
			out[i] = cluster.InProcess(agent)
		}
		return out
	}, nil},
	{"automanaged", func(t *testing.T, n int) []cluster.Membership {
		ports := make([]int, n)
		peers := make([]string, n)
		for i := range ports {
			ports[i] = freePort(t)
			peers[i] = fmt.Sprintf("127.0.0.1:%d", ports[i])
		}
		out := make([]cluster.Membership, n)
		for i := range out {
			out[i] = cluster.Automanaged(cluster.AutomanagedConfig{Port: ports[i], Peers: peers, Refresh: 200 * time.Millisecond})
		}
		return out
	}, nil},
	{"etcd", func(t *testing.T, n int) []cluster.Membership {
		server := etcdtest.Start(t)
		out := make([]cluster.Membership, n)
		for i := range out {
			out[i] = cluster.Etcd(cluster.EtcdConfig{Endpoints: []string{server.Endpoint()}})
		}
		return out
	}, nil},
}

// startCluster starts n nodes at the same moment and makes them leave at
// the end of the test; it waits until every node sees all n members,
// within 10 s.
func startCluster(t *testing.T, n int, nodes func(*testing.T, int) []cluster.Membership) []*cluster.Member {
	t.Helper()
	ms := nodes(t, n)
	members := make([]*cluster.Member, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { members[i], errs[i] = cluster.Start(settings(clusterName(t), ms[i])) })
	}
	wg.Wait()
	t.Cleanup(func() { leaveAll(members) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf(failed+"node %d: %v", i+1, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range members {
		for len(m.Members()) != n {
			if time.Now().After(deadline) {
				t.Fatalf(failed+"node %s sees %d members, want %d", m.Address(), len(m.Members()), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return members
}

// clusterName is a cluster name of the test's own ('/' is not allowed).
func clusterName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

// leaveAll makes the members leave one after the other: protoactor's
// remote can crash a node that stops while a peer's connection to it ends
// (docs/cluster.md).
func leaveAll(members []*cluster.Member) {
	for _, m := range members {
		if m != nil {
			_ = m.Leave()
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(failed, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// caller stands in for a session actor on a node: it sends requests with
// itself as sender and hands back every message it receives.
type caller struct {
	pid  *actor.PID
	root *actor.RootContext
	got  chan any
}

type send struct {
	to  *actor.PID
	msg proto.Message
}

func newCaller(t *testing.T, m *cluster.Member) *caller {
	c := &caller{root: m.System().Root, got: make(chan any, 16)}
	c.pid = c.root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *send:
			ctx.Request(msg.to, msg.msg)
		case proto.Message:
			c.got <- msg
		}
	}))
	t.Cleanup(func() { _ = c.root.StopFuture(c.pid).Wait() })
	return c
}

// ask sends msg to a router and waits for the first message back.
func (c *caller) ask(t *testing.T, to *actor.PID, msg proto.Message) any {
	t.Helper()
	c.root.Send(c.pid, &send{to: to, msg: msg})
	return c.next(t, 10*time.Second)
}

func (c *caller) next(t *testing.T, within time.Duration) any {
	t.Helper()
	select {
	case got := <-c.got:
		return got
	case <-time.After(within):
		t.Fatalf(failed+"no reply within %s", within)
		return nil
	}
}
