package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"

	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/cluster/pgstore"
	"github.com/musepi/musepi/cluster/pgstore/pgtest"
	"github.com/musepi/musepi/messages/protocol"
)

// TestBlocksOutliveTheCluster: with Config.Blocks on PostgreSQL, a key
// blocked and a model cooled down in one cluster are still blocked and
// cooling down in a new cluster on the same database, whose nodes' views
// never saw the change.
func TestBlocksOutliveTheCluster(t *testing.T) {
	t.Parallel() // its own server: it mostly waits for it and the members
	server := pgtest.Start(t)
	store, err := pgstore.Connect(context.Background(), server.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	start := func(name string) (*cluster.Member, *caller) {
		cfg := settings(name, cluster.InProcess(test.NewInMemAgent()))
		cfg.Blocks = store
		m, err := cluster.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Leave() })
		return m, newCaller(t, m)
	}

	m1, c1 := start(clusterName(t) + "-1")
	if r := c1.ask(t, m1.Credentials("p"), &protocol.MarkUsageLimitReached{SessionId: "s1", BlockForMs: 60_000, Token: 1}).(*protocol.UsageLimitReply); !r.GetSwitched() || r.GetCredential() != "B" {
		t.Fatalf("mark: %v; want a switch to B", r)
	}
	if r := c1.ask(t, m1.Fallback("default"), &protocol.NextModelRequest{SessionId: "s1", Role: "default",
		Current: "p/m1", Primary: "p/m1", CooldownMs: 60_000, Token: 2}).(*protocol.NextModelReply); r.GetTo() != "p/m2" {
		t.Fatalf("fallback: %v; want p/m2", r)
	}
	if err := m1.Leave(); err != nil {
		t.Fatal(err)
	}

	m2, c2 := start(clusterName(t) + "-2")
	if !m2.CredentialsView("p").Free("A", time.Now()) {
		t.Fatal("the new node's view knows A's block before any activation")
	}
	if r := c2.ask(t, m2.Credentials("p"), &protocol.SelectCredential{SessionId: "s2"}).(*protocol.CredentialSelected); r.GetCredential() != "B" {
		t.Errorf("the new cluster selected %q; want B (A blocked in the database)", r.GetCredential())
	}
	if m2.CredentialsView("p").Free("A", time.Now()) {
		t.Error("the new node's view does not show A's block loaded from the database")
	}
	r := c2.ask(t, m2.Fallback("default"), &protocol.NextModelRequest{SessionId: "s2", Role: "default",
		Current: "p/m2", Primary: "p/m1", Token: 3}).(*protocol.NextModelReply)
	if r.GetTo() != "p/m3" || r.GetPrimaryCooldownUntilMs() == 0 {
		t.Errorf("the new cluster's fallback: %v; want p/m3 with p/m1 cooling down", r)
	}
	if !slices.Contains(m2.CooldownView("default").CoolingDown(time.Now()), "p/m1") {
		t.Error("the new node's view does not show p/m1's cooldown")
	}
}
