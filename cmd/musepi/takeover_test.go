package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musepi/musepi/cmd/musepi/internal/opsview"
	"github.com/musepi/musepi/internal/testkit/nodetest"
	"github.com/musepi/musepi/provider/fakellm"
)

// TestTakeoverIsVisible is the takeover of docs/cluster.md's recipe, with
// the example scenario (examples/cluster/scenario.json: model "slow"
// answers its first call with a 503 and retry-after: 20) and the example files'
// timings (the default lease, 15 s, and handover timeout, 10 s), on three
// `musepi node` processes and a `musepi rpc --cluster` client. The node
// hosting the session is killed (kill -9) mid-backoff. Then:
//
//   - the client gets host_lost with the killed node's address, then
//     resumed with a survivor's, each once, then the prompt's answer;
//   - `musepi sessions` shows the session "owner left, claimable in N"
//     (and in JSON its claimable_at, the dead node's lease end) between
//     etcd dropping the node and its lease running out, and afterwards
//     held by the survivor that took it over.
func TestTakeoverIsVisible(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, PostgreSQL, three node processes and an rpc client")
	}
	t.Parallel() // mostly waiting on processes
	bin := buildCommand(t)
	sc, err := fakellm.LoadScenario("../../examples/cluster/scenario.json")
	if err != nil {
		t.Fatal(err)
	}
	env := nodetest.Start(t, bin, nodetest.Options{Scenario: sc, Models: []string{"slow"}})
	nodes := []*nodetest.Node{env.StartNode("node1"), env.StartNode("node2"), env.StartNode("node3")}
	if err := env.WaitMembers(3, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, env.DB)
	const id = "takeover"
	c := env.StartClient(nodes[0], "--session-id", id)
	c.Call("m", `{"id":"m","type":"set_model","provider":"fake","modelId":"slow"}`, 20*time.Second)
	c.Send(`{"id":"p","type":"prompt","message":"survive a crash"}`)
	if start, err := c.NextEvent("auto_retry_start", 20*time.Second); err != nil || start["delayMs"].(float64) < 19000 {
		t.Fatalf("auto_retry_start %v, %v; want a 20 s backoff", start, err)
	}
	if err := db.waitRecord(id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	host, survivors := takeoverHost(t, nodes, db.owner(t, id))
	killed := time.Now()
	host.Kill()

	lost, err := c.NextEvent("host_lost", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	toLost := time.Since(killed)
	if lost["member"] != host.Addr {
		t.Errorf("host_lost %v, want member %s (the killed node)", lost, host.Addr)
	}
	claimable, seenAt := waitOwnerLeft(t, bin, survivors[0].Config, id, killed)
	resumed, err := c.NextEvent("resumed", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	toResumed := time.Since(killed)
	if !slices.ContainsFunc(survivors, func(n *nodetest.Node) bool { return resumed["member"] == n.Addr }) {
		t.Errorf("resumed %v, want a survivor's address", resumed)
	}
	settled, err := c.NextEvent("agent_settled", 60*time.Second)
	if err != nil || settled["success"] != true {
		t.Fatalf("agent_settled %v, %v; want success", settled, err)
	}
	if n, m := len(c.Events("host_lost")), len(c.Events("resumed")); n != 1 || m != 1 {
		t.Errorf("%d host_lost and %d resumed events, want one each", n, m)
	}
	after := sessionRow(t, runOps(t, bin, survivors[0].Config, "sessions", "--json"), id)
	if after.Hold != opsview.Held || strings.HasPrefix(after.Owner, host.Name+"#") {
		t.Errorf("after the takeover: %+v; want held by a survivor", after)
	}
	t.Logf("kill -9 of %s mid-backoff: host_lost after %s, musepi sessions showed \"owner left, claimable in %s\" after %s, resumed (on %s) after %s, settled after %s",
		host.Name, toLost.Round(time.Millisecond), claimable.Round(100*time.Millisecond), seenAt.Round(time.Millisecond),
		resumed["member"], toResumed.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}

// takeoverHost is the node whose name owner (name#incarnation) has, and
// the others.
func takeoverHost(t *testing.T, nodes []*nodetest.Node, owner string) (*nodetest.Node, []*nodetest.Node) {
	t.Helper()
	var host *nodetest.Node
	var others []*nodetest.Node
	for _, n := range nodes {
		if n.Name == owner {
			host = n
		} else {
			others = append(others, n)
		}
	}
	if host == nil {
		t.Fatalf("the session's owner %q is none of the nodes", owner)
	}
	return host, others
}

// waitOwnerLeft runs `musepi sessions` (with file) until it shows session
// id held by an owner that left, in its table and in JSON, and returns how
// long it said the session had to wait to be claimable and when (since
// killed) it said so.
func waitOwnerLeft(t *testing.T, bin, file, id string, killed time.Time) (claimable, at time.Duration) {
	t.Helper()
	for deadline := killed.Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		row := sessionRow(t, runOps(t, bin, file, "sessions", "--json"), id)
		if row.Hold == opsview.OwnerLeft {
			at = time.Since(killed)
			if row.ClaimableAt == nil || row.ClaimableAt.Before(killed) || row.ClaimableAt.After(killed.Add(16*time.Second)) {
				t.Fatalf("session %+v: want claimable_at within the 15 s lease after the kill", row)
			}
			var cells []string
			for _, r := range tableRows(runOps(t, bin, file, "sessions")) {
				if r[0] == id {
					cells = r
				}
			}
			if len(cells) < 4 || !strings.HasPrefix(cells[3], "owner left, claimable in ") {
				t.Errorf("table row %q: want its hold \"owner left, claimable in N\"", cells)
			}
			return time.Until(*row.ClaimableAt), at
		}
		if time.Now().After(deadline) {
			t.Fatalf("musepi sessions never showed %s's owner as left (last %+v)", id, row)
		}
	}
}

// sessionRow is session id's row of `musepi sessions --json` output out.
func sessionRow(t *testing.T, out, id string) opsview.Session {
	t.Helper()
	var rows []opsview.Session
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("session %s not in %s", id, out)
	return opsview.Session{}
}
