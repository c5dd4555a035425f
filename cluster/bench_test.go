package cluster_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/musepi/musepi"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/messages/protocol"
	"github.com/musepi/musepi/provider"
)

// BenchmarkBlockPropagation: a usage limit marked through node 1's router,
// until every other node's view shows the new block. One op is the mark's
// round trip plus the propagation; "apply-ms" is the mean time from the
// activation's send to a view applying it. Run it without -race:
// protoactor-go races with itself when members share a process
// (docs/cluster.md).
func BenchmarkBlockPropagation(b *testing.B) {
	agent, name := test.NewInMemAgent(), fmt.Sprintf("bench-%d", time.Now().UnixNano())
	var members []*cluster.Member
	b.Cleanup(func() { leaveAll(members) })
	for range 3 {
		m, err := cluster.Start(settings(name, cluster.InProcess(agent)))
		if err != nil {
			b.Fatal(err)
		}
		members = append(members, m)
	}
	for _, m := range members {
		for len(m.Members()) != 3 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	root, router := members[0].System().Root, members[0].Credentials("p")
	host := members[0].Resolver().Get(cluster.CredentialsKind, "p").GetAddress()
	b.ResetTimer()
	for i := range b.N {
		// Each mark blocks A for a minute from now: later than the last one.
		minUntil := time.Now().Add(time.Minute)
		f := root.RequestFuture(router, &protocol.MarkUsageLimitReached{SessionId: fmt.Sprint("b", i), BlockForMs: 60_000}, 10*time.Second)
		if _, err := f.Result(); err != nil {
			b.Fatal(err)
		}
		for _, m := range members {
			if m.Address() == host {
				continue
			}
			for until, _ := m.CredentialsView("p").Until("A"); until.Before(minUntil); until, _ = m.CredentialsView("p").Until("A") {
				runtime.Gosched()
			}
		}
	}
	b.StopTimer()
	var sum time.Duration
	var n int
	for _, m := range members {
		p := m.Propagation()
		sum += p.Mean * time.Duration(p.Count)
		n += p.Count
	}
	if n > 0 {
		b.ReportMetric(float64(sum)/float64(n)/1e6, "apply-ms")
	}
}

// BenchmarkClusterPrompt: a prompt through node 1's handle to a session
// hosted on node 1 itself and on node 2 (one turn answered at once, two
// history entries written to PostgreSQL). Run it without -race.
func BenchmarkClusterPrompt(b *testing.B) {
	url := pgtest.Start(b).NewDatabase(b)
	agent, name := test.NewInMemAgent(), fmt.Sprintf("bench-%d", time.Now().UnixNano())
	llm := provider.NewScripted(provider.Outcome{Message: provider.Text("ok")})
	var nodes []*musepi.Runtime
	b.Cleanup(func() {
		for _, rt := range nodes {
			_ = rt.Shutdown(context.Background())
		}
	})
	for i := range 2 {
		nodes = append(nodes, joinNode(b, url, name, fmt.Sprint("node", i+1), agent, llm, false))
	}
	waitMembers(b, 2, nodes...)
	sessions := make([]*musepi.Session, len(nodes)) // by the node hosting it
	for i := 0; sessions[0] == nil || sessions[1] == nil; i++ {
		before := []int{nodes[0].Stats().Sessions, nodes[1].Stats().Sessions}
		s, err := nodes[0].NewSession(context.Background(), musepi.WithSessionID(fmt.Sprint("b", i)), musepi.WithModel("p/m1"))
		if err != nil {
			b.Fatal(err)
		}
		for host := range nodes {
			if nodes[host].Stats().Sessions > before[host] && sessions[host] == nil {
				sessions[host] = s
			}
		}
	}
	for host, s := range sessions {
		b.Run(fmt.Sprintf("hosted on node %d", host+1), func(b *testing.B) {
			for range b.N {
				if _, err := s.Prompt(context.Background(), "hi"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
