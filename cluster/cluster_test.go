package cluster_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/musepi/musepi/actors"
	"github.com/musepi/musepi/cluster"
	"github.com/musepi/musepi/messages/protocol"
)

// TestSharedActors runs the shared-actor scenarios on 3 members in one
// process, with each membership provider. The members run in a child test
// process (see runChild): protoactor-go races with itself when two members
// share a process.
func TestSharedActors(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Parallel() // with TestSessionKind's child
	}
	for _, mb := range memberships {
		t.Run(mb.name, func(t *testing.T) {
			switch os.Getenv(childEnv) {
			case "":
				t.Parallel() // each membership's child process mostly waits
				runChild(t, "^TestSharedActors$/^"+mb.name+"$", mb.name, scenarios)
				return
			case mb.name:
			default:
				t.Skip("another membership's child")
			}
			// Runs after the members have left (cleanups run last first).
			t.Cleanup(func() {
				if err := goleak.Find(append(leakyDependencies, mb.leaks...)...); err != nil {
					t.Error(failed, err)
				}
			})
			members := startCluster(t, 3, mb.nodes)
			for _, sc := range []struct {
				name string
				run  func(*testing.T, []*cluster.Member)
			}{
				{"usage limit on node 1 reaches nodes 2 and 3", usageLimit},
				{"cooldown set via node 2 seen from node 3", cooldown},
				{"budget throttles all nodes as one", budget},
				{"activation stops", activationStops},
				{"activation's node leaves", nodeLeaves},
			} {
				t.Run(sc.name, func(t *testing.T) {
					sc.run(t, members)
					t.Log(scenarioDone) // not reached after a Fatal; Errors are caught by their prefix
				})
			}
		})
	}
}

// usageLimit: a session on node 1 hits a usage limit on key A; sessions on
// nodes 2 and 3 then select key B without using A first.
func usageLimit(t *testing.T, ms []*cluster.Member) {
	c1, c2, c3 := newCaller(t, ms[0]), newCaller(t, ms[1]), newCaller(t, ms[2])
	selected := func(c *caller, m *cluster.Member, session string) string {
		t.Helper()
		return c.ask(t, m.Credentials("p"), &protocol.SelectCredential{SessionId: session}).(*protocol.CredentialSelected).GetCredential()
	}
	// Round robin: s1 on node 1 gets A, then B, then A again for s3 on node 3.
	if got := selected(c1, ms[0], "s1"); got != "A" {
		t.Fatalf(failed+"s1 selected %q; want A", got)
	}
	if got := selected(c3, ms[2], "s3-other"); got != "B" {
		t.Fatalf(failed+"s3-other selected %q; want B", got)
	}
	if got := selected(c3, ms[2], "s3"); got != "A" {
		t.Fatalf(failed+"s3 selected %q; want A", got)
	}
	for _, m := range ms {
		if !m.CredentialsView("p").Free("A", time.Now()) {
			t.Fatalf(failed+"node %s: A blocked before any usage limit", m.Address())
		}
	}

	reply := c1.ask(t, ms[0].Credentials("p"), &protocol.MarkUsageLimitReached{SessionId: "s1", BlockForMs: 60_000, Token: 7}).(*protocol.UsageLimitReply)
	marked := time.Now()
	if !reply.GetSwitched() || reply.GetCredential() != "B" || reply.GetToken() != 7 {
		t.Fatalf(failed+"MarkUsageLimitReached: %v; want switched to B, token 7", reply)
	}
	host := ms[0].Resolver().Get(cluster.CredentialsKind, "p").GetAddress()
	for i, m := range ms[1:] {
		waitFor(t, 5*time.Second, func() bool { return !m.CredentialsView("p").Free("A", time.Now()) })
		where := "sent by the activation"
		if m.Address() == host {
			where = "hosts the activation"
		}
		t.Logf("node %d (%s) saw A blocked %v after node 1's reply; publish->apply so far: %+v", i+2, where, time.Since(marked), m.Propagation())
	}
	// s3 on node 3 held A: its view now says A is not free, so it asks,
	// and gets B. A new session on node 2 gets B.
	if got := selected(c3, ms[2], "s3"); got != "B" {
		t.Errorf(failed+"s3 (held A) on node 3 selected %q after the limit; want B", got)
	}
	if got := selected(c2, ms[1], "s2"); got != "B" {
		t.Errorf(failed+"s2 on node 2 selected %q after the limit; want B", got)
	}
}

// cooldown: a model put in cooldown through node 2 is skipped by node 3.
func cooldown(t *testing.T, ms []*cluster.Member) {
	c2, c3 := newCaller(t, ms[1]), newCaller(t, ms[2])
	r := c2.ask(t, ms[1].Fallback("default"), &protocol.NextModelRequest{SessionId: "f2", Role: "default",
		Current: "p/m1", Primary: "p/m1", CooldownMs: 60_000, Token: 1}).(*protocol.NextModelReply)
	set := time.Now()
	if !r.GetSwitched() || r.GetTo() != "p/m2" {
		t.Fatalf(failed+"node 2 NextModel: %v; want a switch to p/m2", r)
	}
	waitFor(t, 5*time.Second, func() bool {
		return slices.Contains(ms[2].CooldownView("default").CoolingDown(time.Now()), "p/m1")
	})
	t.Logf("node 3's view saw p/m1 cooling down %v after node 2's reply (publish->apply: %+v)", time.Since(set), ms[2].Propagation())
	r = c3.ask(t, ms[2].Fallback("default"), &protocol.NextModelRequest{SessionId: "f3", Role: "default",
		Current: "p/m2", Primary: "p/m1", CooldownMs: 60_000, Token: 2}).(*protocol.NextModelReply)
	if !r.GetSwitched() || r.GetTo() != "p/m3" || r.GetPrimaryCooldownUntilMs() == 0 {
		t.Errorf(failed+"node 3 NextModel from p/m2: %v; want p/m3 (p/m1 cooling down) with the primary's cooldown", r)
	}
}

// budget: failures reported by every node drain one bucket (10 tokens,
// held below 5): 2 failures per node leave 4 tokens, and the retries then
// go out one per probe interval whichever node asks.
func budget(t *testing.T, ms []*cluster.Member) {
	cs := []*caller{newCaller(t, ms[0]), newCaller(t, ms[1]), newCaller(t, ms[2])}
	tokens := func() float64 {
		t.Helper()
		return cs[0].ask(t, ms[0].Credentials("p"), &protocol.RetryBudgetStatsRequest{}).(*protocol.RetryBudgetStats).GetTokens()
	}
	fail := func(i int) {
		for range 2 {
			cs[i].root.Send(ms[i].Credentials("p"), &protocol.RetryBudgetOutcome{Success: false})
		}
	}
	fail(0)
	fail(1)
	waitFor(t, 5*time.Second, func() bool { return tokens() == 6 })
	due := time.Now().Add(time.Second).UnixNano()
	g := cs[0].ask(t, ms[0].Credentials("p"), &protocol.RetryBudgetRequest{SessionId: "b1", Token: 1, DueUnixNano: due}).(*protocol.RetryBudgetGrant)
	if g.GetAtUnixNano() != due {
		t.Fatalf(failed+"with 6 tokens a retry is held until %d; want its due time %d", g.GetAtUnixNano(), due)
	}
	fail(2)
	waitFor(t, 5*time.Second, func() bool { return tokens() == 4 })
	due = time.Now().Add(time.Second).UnixNano()
	g = cs[1].ask(t, ms[1].Credentials("p"), &protocol.RetryBudgetRequest{SessionId: "b2", Token: 2, DueUnixNano: due}).(*protocol.RetryBudgetGrant)
	if g.GetAtUnixNano() != due {
		t.Fatalf(failed+"node 2's first retry with the budget spent goes at %d; want its due time %d (the probe)", g.GetAtUnixNano(), due)
	}
	g = cs[2].ask(t, ms[2].Credentials("p"), &protocol.RetryBudgetRequest{SessionId: "b3", Token: 3, DueUnixNano: due,
		ReplyTo: actors.Ref(cs[2].pid)}).(*protocol.RetryBudgetGrant)
	if g.GetAtUnixNano() <= due || g.GetSessionId() != "b3" {
		t.Fatalf(failed+"node 3's retry right after node 2's probe: %v; want it held after its due time %d", g, due)
	}
	// A success while retries are held releases the next one: the release
	// goes from the activation to the session (its reply_to) directly.
	cs[0].root.Send(ms[0].Credentials("p"), &protocol.RetryBudgetOutcome{Success: true})
	rel, ok := cs[2].next(t, 5*time.Second).(*protocol.RetryBudgetRelease)
	if !ok || rel.GetToken() != 3 || rel.GetSessionId() != "b3" {
		t.Fatalf(failed+"node 3's session got %v; want the release of token 3", rel)
	}
}

// activationStops: the fallback activation dies (stopped on its node); a
// caller whose router still has the dead PID gets its answer from a new
// activation, which kept the cooldowns its node's view holds.
func activationStops(t *testing.T, ms []*cluster.Member) {
	pid := ms[0].Resolver().Get(cluster.FallbackKind, "default")
	if pid == nil {
		t.Fatal(failed + "no activation of the fallback kind")
	}
	h := slices.IndexFunc(ms, func(m *cluster.Member) bool { return m.Address() == pid.GetAddress() })
	o := (h + 1) % len(ms)
	c := newCaller(t, ms[o])
	if r := c.ask(t, ms[o].Fallback("default"), &protocol.NextModelRequest{SessionId: "d0", Role: "default",
		Current: "p/m2", Primary: "p/m2", Token: 1}).(*protocol.NextModelReply); !r.GetSwitched() {
		t.Fatalf(failed+"before the stop: %v; want a switch", r)
	}
	if err := ms[h].System().Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(failed, err)
	}
	start := time.Now()
	r := c.ask(t, ms[o].Fallback("default"), &protocol.NextModelRequest{SessionId: "d1", Role: "default",
		Current: "p/m2", Primary: "p/m1", Token: 2}).(*protocol.NextModelReply)
	t.Logf("the first request after the activation stopped took %v", time.Since(start))
	if !r.GetSwitched() || r.GetTo() != "p/m3" || r.GetPrimaryCooldownUntilMs() == 0 {
		t.Errorf(failed+"after the stop: %v; want p/m3 with p/m1's cooldown kept", r)
	}
	if now := ms[o].Resolver().Get(cluster.FallbackKind, "default"); now == nil || now.Equal(pid) {
		t.Errorf(failed+"the activation is %v; want a new one", now)
	}
}

// nodeLeaves: the node hosting the credentials activation leaves; callers
// on the other nodes get answers from a new activation, which kept the
// blocks (from its node's view) but not the sticky choices or the budget.
func nodeLeaves(t *testing.T, ms []*cluster.Member) {
	host := ms[0].Resolver().Get(cluster.CredentialsKind, "p")
	if host == nil {
		t.Fatal(failed + "no activation of the credentials kind")
	}
	h := slices.IndexFunc(ms, func(m *cluster.Member) bool { return m.Address() == host.GetAddress() })
	o := (h + 1) % len(ms)
	c := newCaller(t, ms[o])
	r := c.ask(t, ms[o].Credentials("p"), &protocol.MarkUsageLimitReached{SessionId: "L1", BlockForMs: 60_000, Token: 1}).(*protocol.UsageLimitReply)
	if !r.GetSwitched() || r.GetCredential() != "B" {
		t.Fatalf(failed+"MarkUsageLimitReached: %v; want a switch to B", r)
	}
	waitFor(t, 5*time.Second, func() bool { return !ms[o].CredentialsView("p").Free("A", time.Now()) })

	start := time.Now()
	if err := ms[h].Leave(); err != nil {
		t.Fatal(failed, err)
	}
	left := time.Now()
	got := c.ask(t, ms[o].Credentials("p"), &protocol.SelectCredential{SessionId: "L2"}).(*protocol.CredentialSelected)
	t.Logf("node %d left in %v; the next request took %v", h+1, left.Sub(start), time.Since(left))
	if got.GetCredential() != "B" {
		t.Errorf(failed+"after the move, a new session selected %q; want B (A's block kept)", got.GetCredential())
	}
	moved := ms[o].Resolver().Get(cluster.CredentialsKind, "p")
	if moved == nil || moved.GetAddress() == host.GetAddress() {
		t.Errorf(failed+"the activation is at %v; want it on a remaining node", moved)
	}
	// The budget's state is not carried over: the new bucket starts full.
	if tokens := c.ask(t, ms[o].Credentials("p"), &protocol.RetryBudgetStatsRequest{}).(*protocol.RetryBudgetStats).GetTokens(); tokens != 10 {
		t.Errorf(failed+"the moved budget has %v tokens; want a full bucket of 10", tokens)
	}
	f := c.ask(t, ms[o].Fallback("default"), &protocol.NextModelRequest{SessionId: "L3", Role: "default",
		Current: "p/m2", Primary: "p/m2", Token: 4}).(*protocol.NextModelReply)
	if !f.GetSwitched() {
		t.Errorf(failed+"fallback after the node left: %v; want a switch", f)
	}
}

// waitFor polls cond every 50 µs until it holds, failing after within.
func waitFor(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(failed+"condition not met within %s", within)
		}
		time.Sleep(50 * time.Microsecond)
	}
}
