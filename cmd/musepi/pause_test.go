package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/provider/fakellm"
)

// pauseScenario: model m2 answers its first two calls with a 503 and a
// 4 s retry-after: a backoff to pause the session's node in.
const pauseScenario = `{
  "rules": [
    {"name": "m2: 503, retry in 4 s", "match": {"model": "m2", "first": 2},
     "respond": {"preset": "unavailable", "headers": {"retry-after": "4"}}}
  ],
  "default": {"text": "Hello from fakellm"}
}`

// TestClusterPauseHeals: the node hosting a session is paused (SIGSTOP)
// mid-backoff, past its database lease and etcd's. Another node takes the
// session over and settles its prompt. Then the paused node resumes
// (SIGCONT): it finds itself dropped, says so, leaves and joins again as
// a new member; within 10 s every node's member list and etcd's
// registrations agree. Its timer, due during the pause, starts no
// provider call: fakellm counts exactly the calls of the prompt, and the
// session's history is whole.
func TestClusterPauseHeals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL and three node processes")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	sc, err := fakellm.ParseScenario([]byte(pauseScenario))
	if err != nil {
		t.Fatal(err)
	}
	env := nodetest.Start(t, bin, nodetest.Options{Scenario: sc,
		Extra: "lease_ms = 2000\nhandover_timeout_ms = 3000\nleave_timeout_ms = 10000"})
	nodes := map[string]*nodetest.Node{}
	for _, name := range []string{"node1", "node2", "node3"} {
		nodes[name] = env.StartNode(name)
	}
	if err := env.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, env.DB)
	c := env.StartClient(nodes["node1"], "--session-id", "paused")
	c.Call("m", `{"id":"m","type":"set_model","provider":"fake","modelId":"m2"}`, 20*time.Second)
	host := nodes[db.owner(t, "paused")]
	c.Send(`{"id":"1","type":"prompt","message":"survive a pause"}`)
	if _, err := c.NextEvent("auto_retry_start", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := db.waitRecord("paused", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := host.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	settled, err := c.NextEvent("agent_settled", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if settled["success"] != true {
		t.Fatalf("the prompt settled %v, want success on another node", settled)
	}
	owner := db.owner(t, "paused")
	calls := env.LLM.Stats().ByModel["m2"]
	t.Logf("paused %s mid-backoff; the prompt settled on %s %s later, after %d calls of m2",
		host.Name, owner, time.Since(paused).Round(time.Millisecond), calls)
	if owner == host.Name {
		t.Fatalf("the session is still owned by the paused node %s", host.Name)
	}
	// Past the database lease (2 s) and etcd's (3 s) by far.
	time.Sleep(time.Until(paused.Add(10 * time.Second)))
	mark := host.Output().Len()
	if err := host.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if _, err := host.WaitLine("this node was dropped from the cluster", 10*time.Second); err != nil {
		t.Errorf("the resumed node did not say it was dropped: %v", err)
	}
	// Agreement counts once the node has joined again: just dropped, its
	// list (without itself) matches etcd's for a moment.
	if _, _, err := host.Output().WaitFrom(mark, func(line string) bool { return strings.Contains(line, "listening on") },
		10*time.Second, nil); err != nil {
		t.Fatalf("the resumed node did not join again: %v", err)
	}
	took, err := env.WaitAgreement(time.Until(resumed.Add(10 * time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("member lists and etcd agree %s after SIGCONT (%s after the node joined again): %v",
		time.Since(resumed).Round(time.Millisecond), took.Round(time.Millisecond), host.MemberList())
	if n := host.Members(); n != 4 { // three nodes and the client
		t.Errorf("the resumed node sees %d members, want 4", n)
	}
	// The stale timer fired at SIGCONT; give a call it started time to
	// reach fakellm.
	time.Sleep(time.Until(resumed.Add(3 * time.Second)))
	if after := env.LLM.Stats().ByModel["m2"]; after != calls {
		t.Errorf("m2 called %d times after the paused node resumed, %d before: the stale node called the provider", after, calls)
	}
	if calls != 3 {
		t.Errorf("m2 called %d times for the prompt, want 3 (two 503s, then the answer)", calls)
	}
	db.checkHistories(t, map[string]int{"paused": 1})
	promptOK(t, c, "2", fmt.Sprintf("after %s came back", host.Name))
	// Its prompt settled, the client exits promptly once its input ends.
	start := time.Now()
	if err := c.Close(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("the client exited %s after its input ended, want within 0.5 s", took.Round(time.Millisecond))
	} else {
		t.Logf("the client exited %s after its input ended", took.Round(time.Millisecond))
	}
}
